"""The extractive summarizer, the handoff request and the summary guard."""

from __future__ import annotations

import pytest

from aether_context.compress import (
    HANDOFF_PROMPT,
    ExtractiveSummarizer,
    Summarizer,
    build_handoff_request,
    run_summarizer,
    validate_summary,
)
from aether_context.tokens import TokenCounter

COUNTER = TokenCounter()
GOAL = "Fix admin inlines for auto-created ManyToManyFields that are editable with view permission"

FIRST = [
    "[turn 1] model: This is a Django repository. · $ ls -la",
    "[turn 2] user: exit 0, 30 lines: total 172",
    '[turn 3] bash(command="python3 reproduce_issue.py") → exit 1: django.core.exceptions.ImproperlyConfigured: '
    "Requested setting INSTALLED_APPS, but settings are not configured. · artifact://s/1/t3.txt",
    "[turn 4] model: I need to move the imports after `settings.configure()`. · $ cat <<'EOF' > reproduce_issue.py",
]
SECOND = [
    '[turn 5] read_file(path="django/contrib/admin/options.py") → ok, 2200 lines: import copy · artifact://s/1/t5.txt',
    "[turn 6] model: The fix is to require change permission on the parent model in has_add_permission.",
    '[turn 7] bash(command="python3 reproduce_issue.py") → exit 0, 4 lines: has_add_permission: False',
]


def test_sections_are_derived_from_the_items():
    summary = ExtractiveSummarizer(COUNTER).summarize(None, FIRST + SECOND, goal=GOAL, max_tokens=1000)
    lines = summary.splitlines()
    assert lines[0] == f"Goal: {GOAL}"
    assert lines[1] == "Progress:" and lines[2] == "- " + FIRST[0]
    assert ("- ImproperlyConfigured: Requested setting INSTALLED_APPS, but settings are not configured. "
            "(turn 3) · artifact://s/1/t3.txt") in lines
    assert "- The fix is to require change permission on the parent model in has_add_permission. (turn 6)" in lines
    assert "- django/contrib/admin/options.py" in lines and "- reproduce_issue.py" in lines
    assert [line for line in lines if line.endswith(":")] == ["Progress:", "Decisions:", "Errors:", "Files:"]


def test_incremental_update_equals_one_pass_when_nothing_is_cut():
    summarizer = ExtractiveSummarizer(COUNTER)
    first = summarizer.summarize(None, FIRST, goal=GOAL, max_tokens=1000)
    assert summarizer.summarize(first, SECOND, goal=GOAL, max_tokens=1000) == \
        summarizer.summarize(None, FIRST + SECOND, goal=GOAL, max_tokens=1000)


def test_previous_goal_is_kept_and_items_are_not_duplicated():
    summarizer = ExtractiveSummarizer(COUNTER)
    first = summarizer.summarize(None, FIRST, goal=GOAL, max_tokens=1000)
    again = summarizer.summarize(first, FIRST[-1:], goal="", max_tokens=1000)
    assert again.splitlines()[0] == f"Goal: {GOAL}"
    assert again.count("I need to move the imports") == first.count("I need to move the imports")


def test_hard_cap_drops_plain_progress_before_errors():
    items = [f"[turn {i}] user: exit 0, no output" for i in range(60)] + FIRST + SECOND
    summarizer = ExtractiveSummarizer(COUNTER)
    for cap in (20, 45, 90, 180, 400):
        summary = summarizer.summarize(None, items, goal=GOAL, max_tokens=cap)
        assert COUNTER.count_text(summary) <= cap
        assert summary.startswith("Goal: ")
    tight = summarizer.summarize(None, items, goal=GOAL, max_tokens=180)
    assert "ImproperlyConfigured" in tight and "exit 0, no output" not in tight
    assert summarizer.summarize(None, items, goal=GOAL, max_tokens=0) == ""


def test_same_input_same_bytes():
    a = ExtractiveSummarizer(COUNTER).summarize("Progress:\n- earlier work", FIRST, goal=GOAL, max_tokens=150)
    b = ExtractiveSummarizer(COUNTER).summarize("Progress:\n- earlier work", FIRST, goal=GOAL, max_tokens=150)
    assert a == b


def test_prose_from_an_llm_summary_is_carried_as_written():
    previous = "## Goal\nThe user wants X.\nWe read the settings module and found the bug.\n- Files: app/settings.py"
    summary = ExtractiveSummarizer(COUNTER).summarize(previous, ["[turn 9] model: ran the tests"], goal="",
                                                      max_tokens=200)
    assert summary.startswith("The user wants X.\nWe read the settings module and found the bug.\n")
    assert "- app/settings.py" in summary and "ran the tests" in summary


def test_an_llm_summarys_free_text_is_kept_within_half_the_cap():
    prose = [f"Paragraph {i}: the reader compared chunk {i} with the lease and found nothing new there." for i in range(30)]
    previous = "Goal: read the lease\n" + "\n".join(prose) + "\nNext steps: read the termination terms."
    summary = ExtractiveSummarizer(COUNTER).summarize(previous, ["[turn 40] model: read chunk 40"], goal="",
                                                      max_tokens=300)
    assert COUNTER.count_text(summary) <= 300 and summary.startswith("Goal: read the lease\nParagraph 0:")
    kept = [p for p in prose if p in summary]
    assert kept == prose[:len(kept)] and 0 < len(kept) < len(prose)  # whole lines from the first, within the cap
    assert "read chunk 40" in summary


def test_protocol_and_async_runner():
    summarizer = ExtractiveSummarizer(COUNTER)
    assert isinstance(summarizer, Summarizer)
    with pytest.raises(ValueError, match="line_tokens"):
        ExtractiveSummarizer(COUNTER, line_tokens=2)


async def test_run_summarizer_awaits_async_functions():
    async def fake_llm(previous, items, *, goal, max_tokens):
        return f"{goal}: {len(items)} items, cap {max_tokens}"

    assert await run_summarizer(fake_llm, None, ["a", "b"], goal="G", max_tokens=9) == "G: 2 items, cap 9"
    sync = await run_summarizer(ExtractiveSummarizer(COUNTER), None, FIRST, goal=GOAL, max_tokens=100)
    assert sync.startswith("Goal: ")


def test_handoff_request_carries_everything_the_llm_needs():
    request = build_handoff_request("Progress:\n- old", FIRST, GOAL, 300)
    assert request.startswith(HANDOFF_PROMPT)
    for section in ("Goal:", "Progress:", "Decisions:", "Constraints:", "Next steps:", "Files:", "Errors:"):
        assert section in HANDOFF_PROMPT
    assert "Write at most 300 tokens." in request and f"Goal: {GOAL}" in request
    assert "Previous summary:\nProgress:\n- old" in request
    assert f"- {FIRST[2]}" in request
    assert "Previous summary:\n(none)" in build_handoff_request(None, [], "", 10)


@pytest.mark.parametrize(
    "bad",
    [None, "", "   \n ", "```\n\n```", "I'm sorry, but I can't help with that request.", "!!!! ???? .... ----",
     "ok", "summary " * 100, "- same line\n" * 10],
)
def test_validate_rejects_empty_and_garbage(bad):
    assert validate_summary(bad, 200, COUNTER) is None


def test_validate_cleans_and_caps_good_summaries():
    good = "```markdown\nGoal: fix the bug\nProgress:\n- reproduced the failure in reproduce_issue.py\n```"
    assert validate_summary(good, 200, COUNTER) == \
        "Goal: fix the bug\nProgress:\n- reproduced the failure in reproduce_issue.py"
    long = "Goal: fix the admin inline bug\n" + "\n".join(f"- step {i}: edited module_{i}.py" for i in range(200))
    capped = validate_summary(long, 60, COUNTER)
    assert capped is not None and COUNTER.count_text(capped) <= 60
    assert capped.startswith("Goal: fix the admin inline bug\n- step 0") and long.startswith(capped)
