"""Code context: breadth-first import following inside a repository, within limits."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest

from aether_context.providers.code import (
    CodeContextSettings, approx_tokens, collect_code_context, find_seed_files, import_targets, summarize_source,
)
from aether_context.tokens import TokenCounter

ROOT = Path(__file__).parent / "fixtures" / "coderepo"


def paths(items):
    return [(i.path, i.depth) for i in items]


def test_python_breadth_first_in_import_order():
    items = collect_code_context(["shop/main.py"], ROOT)
    assert paths(items) == [("shop/main.py", 0), ("shop/models.py", 1), ("shop/service.py", 1),
                            ("shop/util/helpers.py", 1)]
    assert items[0].reason == "seed" and items[1].reason == "imported by shop/main.py"
    assert all(not i.summarized and i.tokens == approx_tokens(i.text) for i in items)
    assert items[0].text == (ROOT / "shop/main.py").read_text()


def test_cycle_is_visited_once():
    items = collect_code_context(["shop/models.py"], ROOT, settings=CodeContextSettings(max_depth=10))
    assert paths(items) == [("shop/models.py", 0), ("shop/service.py", 1)]


def test_python_import_forms():
    source = (ROOT / "shop/main.py").read_text()
    # `from shop import models` (submodule), `from .service import ...`, `from shop.util.helpers import ...`;
    # json/os are stdlib and are skipped.
    assert import_targets("shop/main.py", source, ROOT) == ["shop/models.py", "shop/service.py",
                                                             "shop/util/helpers.py"]
    assert import_targets("shop/util/__init__.py", "from .helpers import slugify\n", ROOT) == ["shop/util/helpers.py"]
    assert import_targets("shop/main.py", "import shop.util\nfrom shop import *\n", ROOT) == [
        "shop/util/__init__.py", "shop/__init__.py"]
    assert import_targets("shop/service.py", "import requests\nfrom . import models\n", ROOT) == ["shop/models.py"]


def test_broken_python_falls_back_to_regex():
    broken = "from .service import run_service\nimport shop.models\ndef oops(:\n"
    assert import_targets("shop/main.py", broken, ROOT) == ["shop/service.py", "shop/models.py"]


def test_typescript_resolution_and_order():
    items = collect_code_context(["web/src/index.ts"], ROOT, settings=CodeContextSettings(max_depth=3))
    assert paths(items) == [
        ("web/src/index.ts", 0),
        ("web/src/ui/index.tsx", 1),  # './ui' -> directory index
        ("web/src/types.ts", 1),  # import type ... from "./types"
        ("web/src/api/client.ts", 1),  # export * from './api/client.js' -> .ts
        ("web/src/legacy.js", 1),  # require('./legacy')
        ("web/src/ui/Button.jsx", 2),  # './Button' -> .jsx
    ]


def test_js_skips_packages_comments_and_paths_outside_root():
    legacy = (ROOT / "web/src/legacy.js").read_text()
    assert import_targets("web/src/legacy.js", legacy, ROOT) == []
    assert import_targets("web/src/index.ts", "import React from 'react';\n// import x from './types'\n",
                          ROOT) == []


def test_depth_limit():
    items = collect_code_context(["web/src/index.ts"], ROOT, settings=CodeContextSettings(max_depth=1))
    assert "web/src/ui/Button.jsx" not in [i.path for i in items]
    only = collect_code_context(["web/src/index.ts"], ROOT, settings=CodeContextSettings(max_depth=0))
    assert paths(only) == [("web/src/index.ts", 0)]


def test_file_limit():
    items = collect_code_context(["web/src/index.ts"], ROOT, settings=CodeContextSettings(max_files=3))
    assert paths(items) == [("web/src/index.ts", 0), ("web/src/ui/index.tsx", 1), ("web/src/types.ts", 1)]


def test_token_limit_summarizes_then_skips():
    counter = TokenCounter()
    full = collect_code_context(["shop/main.py"], ROOT, count_tokens=counter.count_text)
    service_summary = summarize_source("shop/service.py", (ROOT / "shop/service.py").read_text())
    cap = full[0].tokens + full[1].tokens + counter.count_text(service_summary) + 1
    items = collect_code_context(["shop/main.py"], ROOT, count_tokens=counter.count_text,
                                 settings=CodeContextSettings(max_tokens=cap))
    assert sum(i.tokens for i in items) <= cap
    assert [i.path for i in items][:2] == ["shop/main.py", "shop/models.py"]
    assert all(i.tokens == counter.count_text(i.text) for i in items)
    assert [(i.path, i.summarized) for i in items] == [("shop/main.py", False), ("shop/models.py", False),
                                                        ("shop/service.py", True)]  # helpers.py fits in no form
    assert items[2].text == service_summary
    strict = collect_code_context(["shop/main.py"], ROOT, count_tokens=counter.count_text,
                                  settings=CodeContextSettings(max_tokens=cap, summarize=False))
    assert not any(i.summarized for i in strict) and sum(i.tokens for i in strict) <= cap


def test_priority_files_come_first():
    items = collect_code_context(["shop/main.py"], ROOT, priority=["shop/util/helpers.py"])
    assert paths(items)[:2] == [("shop/util/helpers.py", 0), ("shop/main.py", 0)]
    assert items[0].reason == "priority"
    assert [i.path for i in items].count("shop/util/helpers.py") == 1


def test_missing_and_escaping_seeds_are_skipped(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "secret.py").write_text("TOKEN = 'x'\n")
    (root / "a.py").write_text("from . import b\n")
    (root / "link.py").symlink_to(tmp_path / "secret.py")
    items = collect_code_context(["missing.py", "../secret.py", str(tmp_path / "secret.py"), "link.py", "a.py"], root)
    assert paths(items) == [("a.py", 0)]


def test_src_layout(tmp_path):
    (tmp_path / "src/pkg").mkdir(parents=True)
    (tmp_path / "src/pkg/__init__.py").write_text("")
    (tmp_path / "src/pkg/core.py").write_text("X = 1\n")
    (tmp_path / "app.py").write_text("import pkg.core\n")
    assert paths(collect_code_context(["app.py"], tmp_path)) == [("app.py", 0), ("src/pkg/core.py", 1)]


def test_find_seed_files():
    texts = ["Fix /testbed/shop/models.py: the Order class. See `web/src/types.ts`.",
             "FAILED tests/test_x.py::test_a and ./shop/main.py:12; also shop/models.py again and nothere.py"]
    assert find_seed_files(texts, ROOT) == ("shop/models.py", "web/src/types.ts", "shop/main.py")


def test_fsspec_memory_filesystem():
    fs = fsspec.filesystem("memory")
    fs.pipe({"/mem/repo/main.py": b"from lib import util\n", "/mem/repo/lib/__init__.py": b"",
             "/mem/repo/lib/util.py": b"def f():\n    return 1\n"})
    items = collect_code_context(["main.py"], "/mem/repo", fs=fs)
    assert paths(items) == [("main.py", 0), ("lib/util.py", 1)]
    assert items[1].text == "def f():\n    return 1\n"
    assert find_seed_files(["edit /other/checkout/lib/util.py"], "/mem/repo", fs=fs) == ("lib/util.py",)


def test_deterministic():
    a = collect_code_context(["web/src/index.ts", "shop/main.py"], ROOT)
    b = collect_code_context(["web/src/index.ts", "shop/main.py"], ROOT)
    assert a == b


def test_summarize_source_keeps_signatures():
    text = (ROOT / "shop/service.py").read_text()
    summary = summarize_source("shop/service.py", text)
    assert "class Service:" in summary and "def run_service(" in summary and "return" not in summary


def test_settings_validate():
    with pytest.raises(ValueError):
        CodeContextSettings(max_files=0)
    with pytest.raises(ValueError):
        CodeContextSettings(max_dept=2)
