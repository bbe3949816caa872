"""The repo map: discovery with .gitignore, tree-sitter imports and symbols, PageRank, the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from aether_context.providers.code import CodeContextSettings, RepoIndex, approx_tokens, repo_map
from aether_context.tokens import TokenCounter

ROOT = Path(__file__).parent / "fixtures" / "coderepo"
COUNT = TokenCounter().count_text


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_python_import_forms():
    index = RepoIndex(ROOT)
    # `from shop import models` (a submodule), `from .service import ...`, `from shop.util.helpers import ...`;
    # json and os are stdlib and skipped
    assert index.imports["shop/main.py"] == ("shop/models.py", "shop/service.py", "shop/util/helpers.py")
    assert index.imports["shop/util/__init__.py"] == ("shop/util/helpers.py",)
    assert index.imports["shop/service.py"] == ("shop/models.py",)


def test_typescript_and_javascript_imports():
    index = RepoIndex(ROOT)
    # './ui' is a directory index, `import type`, './api/client.js' names client.ts, require('./legacy')
    assert index.imports["web/src/index.ts"] == ("web/src/ui/index.tsx", "web/src/types.ts", "web/src/api/client.ts",
                                                 "web/src/legacy.js")
    # a commented-out import, a package and a path outside the root are no edges
    assert index.imports["web/src/legacy.js"] == ()


def test_js_and_ts_symbols_with_signatures(tmp_path):
    index = RepoIndex(write(tmp_path, {
        "src/cart.ts": "export interface Line { sku: string }\nexport type Id = string;\n"
                       "export abstract class Cart<T> extends Base {\n  add(line: Line): void { }\n"
                       "  abstract total(): number;\n}\nexport const price = (line: Line): number => {\n"
                       "  const inner = () => 1;\n  return inner();\n};\n",
        "src/view.jsx": "export default class View extends Component {\n  render() { return <div/>; }\n}\n"
                        "function helper(a, b = 2) { function local() {} }\n",
    }))
    assert index.outline("src/cart.ts") == ["interface Line", "type Id = string", "abstract class Cart<T> extends Base",
                                            "  add(line: Line): void", "  abstract total(): number",
                                            "price = (line: Line): number =>"]
    assert index.outline("src/view.jsx") == ["class View extends Component", "  render()", "function helper(a, b = 2)"]


def test_python_symbols_and_a_broken_file(tmp_path):
    index = RepoIndex(write(tmp_path, {
        "pkg/mod.py": "class A(Base):\n    @property\n    async def f(self, x: int = 1) -> str:\n"
                      "        def local(): pass\n\ndef g(\n    a,\n    b,\n):\n    pass\n",
        "pkg/broken.py": "from .mod import A\ndef oops(:\n\ndef fine(x):\n    return x\n",
    }))
    assert index.outline("pkg/mod.py") == ["class A(Base)", "  async def f(self, x: int = 1) -> str", "def g( a, b, )"]
    assert index.imports["pkg/broken.py"] == ("pkg/mod.py",)
    assert "def fine(x)" in index.outline("pkg/broken.py")


def test_gitignored_files_are_not_in_the_map(tmp_path):
    root = write(tmp_path, {
        ".gitignore": "build/\n*.gen.py\n", "app.py": "import lib\n", "lib.py": "def f(): pass\n",
        "build/out.py": "def built(): pass\n", "schema.gen.py": "def gen(): pass\n",
        "web/.gitignore": "dist\n", "web/dist/bundle.js": "function b() {}\n", "web/main.js": "function m() {}\n",
        ".git/hooks/x.py": "def hook(): pass\n", ".github/ci.py": "def ci(): pass\n",
    })
    index = RepoIndex(root)
    assert index.files == (".github/ci.py", "app.py", "lib.py", "web/main.js")
    items = repo_map(index, ["Fix build/out.py and schema.gen.py"], count_tokens=COUNT)
    assert [i.path for i in items] == ["lib.py", ".github/ci.py", "app.py", "web/main.js"]  # none ignored is named


def test_symlink_leaving_the_root_is_skipped(tmp_path):
    (tmp_path / "secret.py").write_text("TOKEN = 'x'\n")
    root = write(tmp_path / "repo", {"a.py": "from . import b\n"})
    (root / "link.py").symlink_to(tmp_path / "secret.py")
    assert RepoIndex(root).files == ("a.py",)


def test_the_named_file_comes_first_in_full():
    items = repo_map(RepoIndex(ROOT), ["Why does /testbed/shop/service.py crash?"], count_tokens=COUNT)
    assert items[0].path == "shop/service.py" and items[0].reason == "named" and not items[0].outline
    assert items[0].text == "shop/service.py (named in the task):\n" + (ROOT / "shop/service.py").read_text()
    assert all(i.reason == "map" and i.outline for i in items[1:])
    assert items[1].path == "shop/models.py"  # what the named file imports ranks next
    assert len({i.path for i in items}) == len(items) == 12


def test_budget_and_named_share(tmp_path):
    big = "".join(f"def f{i}(a, b):\n    return a + b + {i}\n\n" for i in range(200))
    root = write(tmp_path, {"big.py": big, **{f"m{i}.py": f"import big\ndef g{i}(x): pass\n" for i in range(40)}})
    settings = CodeContextSettings(max_tokens=600, named_share=0.5)
    items = repo_map(RepoIndex(root, settings), ["Speed up big.py"], count_tokens=COUNT)
    assert items[0].path == "big.py" and items[0].outline and items[0].tokens <= 300  # too big in full
    assert items[0].text.endswith("\n  …") and "def f0(a, b)" in items[0].text
    assert sum(i.tokens for i in items) <= 600 and all(i.tokens == COUNT(i.text) for i in items)
    assert 5 < len(items) < 41  # the map stops when the budget is spent
    approx = repo_map(RepoIndex(root, settings), ["Speed up big.py"])
    assert sum(i.tokens for i in approx) <= 600 and all(i.tokens == approx_tokens(i.text) for i in approx)


def test_pagerank_ranks_the_hub_up_and_the_task_ranks_its_symbols_up(tmp_path):
    root = write(tmp_path, {
        "core.py": "def hub(): pass\n", "zz_leaf.py": "def leaf_only(): pass\n", "pastebin.py": "def paste(): pass\n",
        **{f"a{i}.py": "from core import hub\n" for i in range(5)},
    })
    index = RepoIndex(root)
    ranked = index.ranked([], index.mentioned(["Improve the docs"]))
    assert ranked[0] == "core.py" and ranked.index("core.py") < ranked.index("zz_leaf.py")
    asked = index.ranked([], index.mentioned(["leaf_only() returns None"]))
    assert asked[0] == "zz_leaf.py"
    assert index.ranked([], index.mentioned(["The --pastebin option fails"]))[0] == "pastebin.py"  # by its name
    assert index.ranked(["a3.py"], ())[:2] == ["a3.py", "core.py"]


def test_src_layout_and_named_files(tmp_path):
    index = RepoIndex(write(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/core.py": "X = 1\n", "app.py": "import pkg.core\n"}))
    assert index.imports["app.py"] == ("src/pkg/core.py",)
    texts = ["Fix /testbed/src/pkg/core.py, see `app.py`.", "FAILED app.py::test_a and ./src/pkg/core.py:12; nothere.py"]
    assert index.named_files(texts) == ("src/pkg/core.py", "app.py")


def test_deterministic():
    a = repo_map(RepoIndex(ROOT), ["web/src/index.ts and shop/main.py: render Order"], count_tokens=COUNT)
    b = repo_map(RepoIndex(ROOT), ["web/src/index.ts and shop/main.py: render Order"], count_tokens=COUNT)
    assert a == b and [i.path for i in a][:2] == ["web/src/index.ts", "shop/main.py"]


def test_settings_validate():
    with pytest.raises(ValueError):
        CodeContextSettings(named_share=0)
    with pytest.raises(ValueError):
        CodeContextSettings(max_dept=2)
