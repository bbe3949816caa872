"""Code context for coding agents: the files the task names, then a ranked map of the repository.

Why: an agent about to edit `shop/main.py` does better when it also sees what the repository holds around
it, but a whole repository never fits. Files are discovered with every .gitignore honoured (pathspec),
parsed with tree-sitter (Python, JavaScript, TypeScript) for their imports and symbols (classes and
functions with their signatures), and ranked by PageRank over the import graph, personalised towards the
files the task names and the symbols it mentions. The named files take the first share of the budget (in
full, or as their outline); the map fills the rest, one outline per file, best first. Same tree and inputs
→ same items in the same order (ties broken by path). Needs the `code` extra.

Usage::

    index = RepoIndex("/path/to/repo")
    items = repo_map(index, [task_text], count_tokens=counter.count_text)
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CodeContextItem", "CodeContextSettings", "RepoIndex", "approx_tokens", "repo_map"]

logger = logging.getLogger(__name__)

CountTokens = Callable[[str], int]
JS_EXTS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs")
_SEED = re.compile(r"(?:(?<=[\s'\"`(\[=:,])|^)((?:\.{0,2}/)?(?:[\w.@-]+/)*[\w@-][\w.@-]*"
                   r"\.(?:pyi?|tsx?|jsx?|mjs|cjs))\b", re.MULTILINE)
_IDENT = re.compile(r"[A-Za-z_]\w{2,}")
_JS_DEFS = """
(class_declaration body: (_) @body) @def
(function_declaration body: (_) @body) @def
(generator_function_declaration body: (_) @body) @def
(method_definition body: (_) @body) @def
(variable_declarator value: [(arrow_function body: (_) @body) (function_expression body: (_) @body)]) @def
"""
_QUERIES = {  # language: (definitions, imports)
    "python": ("(class_definition body: (_) @body) @def (function_definition body: (_) @body) @def",
               "[(import_statement) (import_from_statement)] @imp"),
    "javascript": (_JS_DEFS, """
(import_statement source: (string (string_fragment) @spec))
(export_statement source: (string (string_fragment) @spec))
(call_expression function: (identifier) @fn arguments: (arguments . (string (string_fragment) @spec))
 (#eq? @fn "require"))
(call_expression function: (import) arguments: (arguments . (string (string_fragment) @spec)))
"""),
}
_QUERIES["typescript"] = (_JS_DEFS + """
(abstract_class_declaration body: (_) @body) @def
(interface_declaration body: (_) @body) @def
(enum_declaration body: (_) @body) @def
(type_alias_declaration) @def
(function_signature) @def
(method_signature) @def
(abstract_method_signature) @def
""", _QUERIES["javascript"][1] + "(import_require_clause source: (string (string_fragment) @spec))")
_QUERIES["tsx"] = _QUERIES["typescript"]
_LANGUAGE_OF = {".py": "python", ".pyi": "python", ".ts": "typescript", ".tsx": "tsx",
                **{e: "javascript" for e in (".js", ".jsx", ".mjs", ".cjs")}}
_SYMBOL_WEIGHT, _STEM_WEIGHT = 0.5, 0.5  # a mentioned symbol's or file name's pull, against 1 for a named file
_CONTAINERS = {"class_definition", "class_declaration", "abstract_class_declaration", "interface_declaration"}


def approx_tokens(text: str) -> int:
    """Four characters per token: the fallback when no tokenizer is plugged in."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class CodeContextItem:
    """One file for the context: its path, then its full text or (when `outline`) its symbols."""

    path: str  # POSIX path relative to the root
    tokens: int  # count_tokens(text)
    text: str  # a header line naming the path and why, then the body
    reason: str  # "named" or "map"
    outline: bool = False


class CodeContextSettings(BaseModel):
    """Limits for one repository map."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int = Field(8000, ge=1, description="Total tokens over all items: the named files, then the map.")
    named_share: float = Field(0.5, gt=0, le=1, description="The named files' share of max_tokens, given first.")
    file_max_tokens: int = Field(256, ge=8, description="One map file's outline: more files, or more of each.")
    max_files: int = Field(50_000, ge=1, description="Discovery stops after this many source files.")
    max_file_bytes: int = Field(512_000, ge=1, description="Larger files are not read at all (generated code, data).")


def require_code_extra() -> None:
    """Fail with the fix when the `code` extra is not installed."""
    try:
        import networkx, pathspec, scipy, tree_sitter, tree_sitter_javascript, tree_sitter_python  # noqa: F401,E401
        import tree_sitter_typescript  # noqa: F401
    except ImportError as e:
        raise ImportError(f"CodeContextProvider needs {e.name}: pip install 'aether-context-adk[code]'") from e


def _parsers() -> dict[str, tuple[Any, Any, Any]]:
    """language: (parser, definitions query, imports query)."""
    import tree_sitter as ts
    import tree_sitter_javascript as tsj
    import tree_sitter_python as tsp
    import tree_sitter_typescript as tst

    out = {}
    for name, raw in (("python", tsp.language()), ("javascript", tsj.language()),
                      ("typescript", tst.language_typescript()), ("tsx", tst.language_tsx())):
        lang = ts.Language(raw)
        out[name] = (ts.Parser(lang), *(ts.QueryCursor(ts.Query(lang, q)) for q in _QUERIES[name]))
    return out


def discover(root: Path, max_files: int) -> list[str]:
    """Source files under `root` as sorted root-relative POSIX paths; every .gitignore is honoured for its
    directory, `.git` is skipped, and so is a symlink that leaves the root."""
    import pathspec

    specs: list[tuple[str, Any]] = []  # (directory, its .gitignore)
    found: list[str] = []

    def ignored(rel: str, is_dir: bool) -> bool:
        return any(spec.match_file(rel[len(d) + 1 if d else 0:] + ("/" if is_dir else ""))
                   for d, spec in specs if not d or rel.startswith(d + "/"))

    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath).relative_to(root).as_posix()
        here = "" if here == "." else here
        if ".gitignore" in filenames:
            lines = (Path(dirpath) / ".gitignore").read_text(errors="replace").splitlines()
            specs.append((here, pathspec.GitIgnoreSpec.from_lines(lines)))
        join = lambda name: f"{here}/{name}" if here else name  # noqa: E731
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and not ignored(join(d), True))
        for name in sorted(filenames):
            rel = join(name)
            if (posixpath.splitext(name)[1] in _LANGUAGE_OF and not ignored(rel, False)
                    and (root / rel).resolve().is_relative_to(root)):
                found.append(rel)
        if len(found) >= max_files:
            break
    return sorted(found[:max_files])


@dataclass(frozen=True)
class _Parsed:
    symbols: tuple[tuple[int, str, str], ...]  # (nesting depth, signature, name) in source order
    refs: tuple[Any, ...]  # Python: (level, module, names); JS/TS: import specifiers


def _text(source: bytes, start: int, end: int) -> str:
    return " ".join(source[start:end].decode("utf-8", "replace").split())


def _parse(parsers: dict, lang: str, source: bytes) -> _Parsed:
    parser, defs, imports = parsers[lang]
    root = parser.parse(source).root_node
    found = sorted(((m["def"][0], m.get("body", [None])[0]) for _, m in defs.matches(root)),
                   key=lambda d: (d[0].start_byte, -d[0].end_byte))
    symbols, stack = [], []  # stack: the definitions around this one, (end byte, type)
    for node, body in found:
        while stack and stack[-1][0] <= node.start_byte:
            stack.pop()
        if all(kind in _CONTAINERS for _, kind in stack):  # no local functions
            line_end = source.find(b"\n", node.start_byte)
            end = body.start_byte if body is not None else node.end_byte if line_end < 0 else min(node.end_byte, line_end)
            name = node.child_by_field_name("name")
            symbols.append((len(stack), _text(source, node.start_byte, end).rstrip(" :{;")[:200],
                            _text(source, name.start_byte, name.end_byte) if name is not None else ""))
        stack.append((node.end_byte, node.type))
    if lang != "python":
        specs = sorted(imports.captures(root).get("spec", []), key=lambda n: n.start_byte)
        return _Parsed(tuple(symbols), tuple(_text(source, n.start_byte, n.end_byte) for n in specs))
    refs = []
    for node in sorted(imports.captures(root).get("imp", []), key=lambda n: n.start_byte):
        names = [n.child_by_field_name("name") or n if n.type == "aliased_import" else n
                 for n in node.children_by_field_name("name")]
        names = [_text(source, n.start_byte, n.end_byte) for n in names]
        if node.type == "import_statement":
            refs += [(0, name, ()) for name in names]
            continue
        module = node.child_by_field_name("module_name")
        level, dotted = 0, module
        if module.type == "relative_import":
            prefix = next((c for c in module.children if c.type == "import_prefix"), None)
            level = prefix.end_byte - prefix.start_byte if prefix is not None else 0
            dotted = next((c for c in module.children if c.type == "dotted_name"), None)
        refs.append((level, _text(source, dotted.start_byte, dotted.end_byte) if dotted else "", tuple(names)))
    return _Parsed(tuple(symbols), tuple(refs))


class RepoIndex:
    """The source files under a root, their symbols, and the import graph between them, built once."""

    def __init__(self, root: str | Path, settings: CodeContextSettings | None = None):
        import networkx as nx

        self.root = Path(root).resolve()
        self.settings = settings or CodeContextSettings()
        self.files = tuple(discover(self.root, self.settings.max_files))
        self._file_set = frozenset(self.files)
        parsers = _parsers()
        self.symbols: dict[str, tuple[tuple[int, str, str], ...]] = {}
        self.imports: dict[str, tuple[str, ...]] = {}
        for rel in self.files:
            source, parsed = self._bytes(rel), _Parsed((), ())
            try:
                parsed = _parse(parsers, _LANGUAGE_OF[posixpath.splitext(rel)[1]], source) if source else parsed
            except Exception:  # a tree shape the queries did not expect: the file is listed without symbols
                logger.warning("repo map: cannot parse %s", rel, exc_info=True)
            self.symbols[rel] = parsed.symbols
            resolve = self._python_targets if rel.endswith((".py", ".pyi")) else self._js_targets
            self.imports[rel] = tuple(dict.fromkeys(t for t in resolve(rel, parsed.refs) if t != rel))
        self.defined: dict[str, list[str]] = {}  # symbol name: the files defining it
        for rel in self.files:
            for name in dict.fromkeys(s[2] for s in self.symbols[rel] if s[2]):
                self.defined.setdefault(name, []).append(rel)
        self.stems: dict[str, list[str]] = {}  # a file's name, lower case, without suffix (__init__: its package's)
        for rel in self.files:
            stem = posixpath.splitext(posixpath.basename(rel))[0]
            stem = posixpath.basename(posixpath.dirname(rel)) if stem == "__init__" else stem
            self.stems.setdefault(stem.lower().strip("_"), []).append(rel)
        self.graph = nx.DiGraph()
        self.graph.add_nodes_from(self.files)
        self.graph.add_edges_from((rel, t) for rel in self.files for t in self.imports[rel])
        self.hub = nx.pagerank(self.graph) if self.files else {}

    def _bytes(self, rel: str) -> bytes | None:
        try:
            path = self.root / rel
            if path.stat().st_size > self.settings.max_file_bytes:
                return None
            data = path.read_bytes()
        except OSError as e:
            logger.debug("cannot read %s: %s", rel, e)
            return None
        return None if b"\x00" in data[:8192] else data

    def read(self, rel: str) -> str | None:
        data = self._bytes(rel)
        return None if data is None else data.decode("utf-8", "replace")

    def _python_targets(self, rel: str, refs: Iterable[tuple[int, str, tuple[str, ...]]]) -> list[str]:
        def first(prefixes: Iterable[str]) -> str | None:
            return next((f for p in prefixes if p for f in (f"{p}.py", f"{p}/__init__.py", f"{p}.pyi")
                         if f in self._file_set), None)

        targets: list[str] = []
        for level, module, names in refs:
            mod_path = module.replace(".", "/")
            if level == 0:
                prefixes = [mod_path, "src/" + mod_path]
            else:
                package = posixpath.dirname(rel)
                for _ in range(level - 1):
                    package = posixpath.dirname(package)
                prefixes = [posixpath.normpath(posixpath.join(package, mod_path)) if mod_path else package]
            # `from pkg import mod` names a submodule when such a file exists
            hits = [first(posixpath.join(p, name.replace(".", "/")) for p in prefixes) for name in names]
            if not any(hits) and (mod_path or level):
                hits.append(first(prefixes))
            targets += [h for h in hits if h]
        return targets

    def _js_targets(self, rel: str, specs: Iterable[str]) -> list[str]:
        targets: list[str] = []
        for spec in specs:
            if not spec.startswith((".", "/")):
                continue  # a package, not a file of this repository
            base = posixpath.normpath(posixpath.join(posixpath.dirname(rel), spec) if spec[0] == "." else spec[1:])
            stem, ext = posixpath.splitext(base)
            candidates = [base] if ext in JS_EXTS else []
            if ext in (".js", ".jsx", ".mjs", ".cjs"):  # TypeScript ESM style: './x.js' names x.ts
                candidates += [stem + ".ts", stem + ".tsx"]
            candidates += [base + e for e in JS_EXTS] + [f"{base}/index{e}" for e in JS_EXTS]
            targets += [c for c in candidates if c in self._file_set][:1]
        return targets

    def named_files(self, texts: Iterable[str]) -> tuple[str, ...]:
        """Files named in `texts`, in order of first mention. A path from another checkout
        (`/testbed/pkg/mod.py`) names the file its longest existing suffix names."""
        found: dict[str, None] = {}
        for text in texts:
            for m in _SEED.finditer(text or ""):
                parts = [p for p in m.group(1).split("/") if p not in ("", ".")]
                hit = next((s for i in range(len(parts)) if (s := "/".join(parts[i:])) in self._file_set), None)
                if hit is not None:
                    found.setdefault(hit)
        return tuple(found)

    def mentioned(self, texts: Iterable[str]) -> tuple[str, ...]:
        """The symbol names and the file names (lower case, also a part of a snake_case word) `texts` mention."""
        words = {w for t in texts for w in _IDENT.findall(t or "")}
        lower = {p for w in words for p in (w.lower(), *w.lower().split("_"))}
        return tuple(sorted({w for w in words if w in self.defined} | {w for w in lower if w in self.stems}))

    def ranked(self, named: Sequence[str], idents: Sequence[str]) -> list[str]:
        """Every file, best first: the named files, then by PageRank personalised towards the named files, the
        files defining the mentioned symbols and the files mentioned by name, then by plain PageRank, then by path."""
        import networkx as nx

        weights: dict[str, float] = dict.fromkeys(named, 1.0)
        for term in idents:
            for files, share in ((self.defined.get(term, ()), _SYMBOL_WEIGHT), (self.stems.get(term, ()), _STEM_WEIGHT)):
                for rel in files:
                    weights[rel] = weights.get(rel, 0.0) + share / len(files)
        task = nx.pagerank(self.graph, personalization=weights) if weights else self.hub
        rest = sorted((f for f in self.files if f not in named),
                      key=lambda f: (-round(task[f], 12), -round(self.hub[f], 12), f))
        return [*named, *rest]

    def outline(self, rel: str) -> list[str]:
        return ["  " * depth + sig for depth, sig, _ in self.symbols.get(rel, ())]


def repo_map(index: RepoIndex, task_texts: Sequence[str], *, recent_texts: Sequence[str] = (),
             count_tokens: CountTokens = approx_tokens) -> tuple[CodeContextItem, ...]:
    """The named files (in `task_texts`, then `recent_texts`) within their share, then the ranked map of
    the rest within what is left of `max_tokens`, each file's outline within `file_max_tokens`."""
    s = index.settings
    named = index.named_files([*task_texts, *recent_texts])
    items: list[CodeContextItem] = []

    def fit(rel: str, reason: str, head: str, lines: list[str], room: int, outline: bool = True) -> None:
        text = "\n".join([head, *lines])
        if count_tokens(text) > room:  # the outline's first lines that fit
            left, kept = room - count_tokens(f"{head}\n  …") - 1, []
            for line in lines:
                left -= count_tokens(line) + 1
                if left < 0:
                    break
                kept.append(line)
            text = "\n".join([head, *kept, "  …"])
            while kept and count_tokens(text) > room:
                kept.pop()
                text = "\n".join([head, *kept, "  …"])
        if count_tokens(text) <= room:
            items.append(CodeContextItem(rel, count_tokens(text), text, reason, outline))

    used = lambda: sum(i.tokens for i in items)  # noqa: E731
    for rel in named:
        left, source = int(s.max_tokens * s.named_share) - used(), index.read(rel)
        full = f"{rel} (named in the task):\n{source}"
        if source is not None and count_tokens(full) <= left:
            items.append(CodeContextItem(rel, count_tokens(full), full, "named"))
        else:
            fit(rel, "named", f"{rel} (named in the task; classes and functions only):", index.outline(rel), left)
    given = {i.path for i in items}
    for rank, rel in enumerate(index.ranked(named, index.mentioned(task_texts)), 1):
        left = s.max_tokens - used()
        if left < 8:
            break
        if rel not in given:
            fit(rel, "map", f"{rel} (repo map #{rank}):", index.outline(rel), min(left, s.file_max_tokens))
    return tuple(items)
