"""Reference extraction, scoring, merging and rendering."""

from __future__ import annotations

from aether_context.compress import (
    Reference,
    extract_call_references,
    extract_references,
    merge_references,
    render_references,
    score_references,
)
from aether_context.content import FunctionCall
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()

TRACEBACK = """\
<returncode>1</returncode>
<output>
Traceback (most recent call last):
  File "reproduce_issue.py", line 72, in <module>
    perm = Permission.objects.get(codename='view_report')
  File "/testbed/django/db/models/manager.py", line 82, in manager_method
    return getattr(self.get_queryset(), name)(*args, **kwargs)
  File "/testbed/django/db/models/query.py", line 407, in get
    self.model._meta.object_name
django.contrib.auth.models.DoesNotExist: Permission matching query does not exist.
</output>"""

DIFF = """\
diff --git a/django/contrib/admin/options.py b/django/contrib/admin/options.py
index 880a2cc17b..445126d0c5 100644
--- a/django/contrib/admin/options.py
+++ b/django/contrib/admin/options.py
@@ -2117,7 +2117,13 @@ class InlineModelAdmin(BaseModelAdmin):
-            return self.has_view_permission(request, obj)
+            if not self.has_view_permission(request, obj):
+                return False
@@ -2130,6 +2136,9 @@ class InlineModelAdmin(BaseModelAdmin):
     def has_change_permission(self, request, obj=None):
"""


def _pairs(refs: list[Reference]) -> list[tuple[str, str]]:
    return [(r.kind, r.value) for r in refs]


def test_traceback_yields_files_functions_and_the_error():
    refs = extract_references(TRACEBACK, source_uri="artifact://s/1/t5.txt", turn=5)
    pairs = _pairs(refs)
    assert ("file", "reproduce_issue.py") in pairs
    assert ("file", "/testbed/django/db/models/query.py") in pairs
    assert ("function", "manager_method") in pairs and ("function", "get") in pairs
    assert ("error", "DoesNotExist: Permission matching query does not exist.") in pairs
    assert all(r.source_uri == "artifact://s/1/t5.txt" and r.turn == 5 for r in refs)
    assert len(pairs) == len(set(pairs))  # once per (kind, value)
    assert refs == extract_references(TRACEBACK, source_uri="artifact://s/1/t5.txt", turn=5)


def test_diff_yields_the_file_once_and_the_symbols():
    pairs = _pairs(extract_references(DIFF))
    files = [v for k, v in pairs if k == "file"]
    assert files == ["django/contrib/admin/options.py"]
    assert ("function", "InlineModelAdmin") in pairs and ("function", "has_change_permission") in pairs


def test_paths_urls_and_false_friends():
    text = ("See django/db/models/query.py:123 and ./static/app.js, then read tox.ini. "
            "Docs: https://docs.djangoproject.com/en/stable/ref/contrib/admin/. "
            "Saved to artifact://s/1/t3.txt. We call response.json() and use e.g. os.path here; "
            "from django.conf import settings")
    pairs = _pairs(extract_references(text))
    assert [v for k, v in pairs if k == "file"] == ["django/db/models/query.py", "static/app.js", "tox.ini"]
    assert [v for k, v in pairs if k == "url"] == ["https://docs.djangoproject.com/en/stable/ref/contrib/admin/"]


def test_errors_commands_and_decisions():
    text = ("$ pytest -x tests/test_models.py\n"
            "FAILED tests/test_models.py::test_save - AssertionError: assert 1 == 2\n"
            "error: could not compile `core` due to previous error\n"
            "We decided to use a through model instead of patching the form. It ran fine.\n"
            "```bash\ngrep -n \"def has_add_permission\" django/contrib/admin/options.py\n```\n")
    pairs = _pairs(extract_references(text))
    assert ("command", "pytest -x tests/test_models.py") in pairs
    assert ("command", 'grep -n "def has_add_permission" django/contrib/admin/options.py') in pairs
    assert ("error", "AssertionError: assert 1 == 2") in pairs
    assert ("error", "FAILED tests/test_models.py::test_save - AssertionError: assert 1 == 2") in pairs
    assert ("error", "error: could not compile `core` due to previous error") in pairs
    assert ("decision", "We decided to use a through model instead of patching the form.") in pairs
    assert not any(k == "decision" and "ran fine" in v for k, v in pairs)


def test_call_arguments_name_files_and_commands():
    bash = FunctionCall("bash", {"command": "python -m pytest tests/test_x.py -q\necho done"})
    assert _pairs(extract_call_references(bash, turn=2)) == [
        ("command", "python -m pytest tests/test_x.py -q"), ("file", "tests/test_x.py")]
    read = FunctionCall("read_file", {"path": "src/a.py", "limit": 50})
    assert _pairs(extract_call_references(read, source_uri="u://r", turn=2)) == [("file", "src/a.py")]


def test_scoring_prefers_goal_overlap_then_kind_then_recency():
    refs = [
        Reference("file", "README.rst", "u://9", 9),
        Reference("error", "DoesNotExist: Permission matching query does not exist.", "u://1", 1),
        Reference("file", "django/contrib/admin/options.py", "u://9", 9),
        Reference("error", "ValueError: bad value", "u://9", 9),
    ]
    ranked = score_references(refs, "Fix the admin options permission bug", current_turn=10)
    assert [r.value for r in ranked] == [
        "django/contrib/admin/options.py",  # overlaps the goal twice
        "DoesNotExist: Permission matching query does not exist.",  # overlaps once, but old
        "ValueError: bad value",  # errors outweigh files
        "README.rst",
    ]
    assert ranked[0].score > ranked[1].score > ranked[2].score > ranked[3].score > 0


def test_merge_keeps_best_score_and_latest_uri():
    refs = [Reference("file", "a.py", "u://1", 1, 0.9), Reference("file", "a.py", "u://7", 7, 0.2),
            Reference("error", "E: x", "u://2", 2, 0.5)]
    merged = merge_references(refs)
    assert merged == [Reference("file", "a.py", "u://7", 7, 0.9), Reference("error", "E: x", "u://2", 2, 0.5)]


def test_render_groups_by_kind_with_uris_within_the_cap():
    refs = score_references(
        extract_references(TRACEBACK, source_uri="artifact://s/1/t5.txt", turn=5)
        + extract_references(DIFF, source_uri="artifact://s/1/t9.txt", turn=9),
        "fix permission query for admin inlines", current_turn=10)
    block = render_references(refs, 120, COUNTER)
    lines = block.splitlines()
    assert lines[0] == "References:" and COUNTER.count_text(block) <= 120
    assert lines.index("Errors:") < lines.index("Files:")
    assert all(" · artifact://s/1/t" in line for line in lines if line.startswith("- "))
    assert "- DoesNotExist: Permission matching query does not exist. · artifact://s/1/t5.txt" in lines
    small = render_references(refs, 30, COUNTER)
    assert COUNTER.count_text(small) <= 30 and len(small.splitlines()) < len(lines)
    assert render_references(refs, 0, COUNTER) == "" and render_references([], 100, COUNTER) == ""


def test_long_tokens_do_not_make_extraction_quadratic():
    import time

    start = time.perf_counter()
    for text in ("aB1.-+" * 20000, "a." * 60000, "x@y." * 30000, "\n" * 100000, "a/b.c/" * 20000):
        extract_references(text)
    assert time.perf_counter() - start < 15  # a quadratic pattern takes minutes on these
