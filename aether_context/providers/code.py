"""Code context for coding agents: the files a task names, and what they import, within a budget.

Why: a coding agent that is about to edit `shop/main.py` does better when it also sees the modules that
file imports, but a whole repository never fits. Starting from seed files (named in the task or recent
turns) and priority files, imports are followed breadth-first — nearest first — inside the repository
only, until a depth, file-count or token limit is reached. Files too large for what is left are given as
a signatures-only summary. Same repository and inputs → same items in the same order.

Usage::

    seeds = find_seed_files([task_text, *recent_texts], root)
    items = collect_code_context(seeds, root, count_tokens=counter.count_text,
                                 settings=CodeContextSettings(max_depth=2, max_files=8, max_tokens=6000))
"""

from __future__ import annotations

import ast
import logging
import posixpath
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CodeContextItem", "CodeContextSettings", "approx_tokens", "collect_code_context", "find_seed_files",
    "import_targets", "summarize_source",
]

logger = logging.getLogger(__name__)

CountTokens = Callable[[str], int]
PY_EXTS = (".py", ".pyi")
JS_EXTS = (".ts", ".tsx", ".js", ".jsx", ".mjs", ".cjs")
_SEED = re.compile(r"(?:(?<=[\s'\"`(\[=:,])|^)((?:\.{0,2}/)?(?:[\w.@-]+/)*[\w@-][\w.@-]*"
                   r"\.(?:pyi?|tsx?|jsx?|mjs|cjs))\b", re.MULTILINE)


def approx_tokens(text: str) -> int:
    """Four characters per token: the fallback when no tokenizer is plugged in."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class CodeContextItem:
    """One file chosen for the context: full text, or a signatures-only summary when `summarized`."""

    path: str  # POSIX path relative to the root
    depth: int  # 0 for seeds and priority files, n for files n imports away
    tokens: int  # count_tokens(text)
    text: str
    reason: str  # "priority", "seed" or "imported by <path>"
    summarized: bool = False


class CodeContextSettings(BaseModel):
    """Limits for one code-context collection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_depth: int = Field(2, ge=0, description="How many import hops from a seed to follow (0: seeds only).")
    max_files: int = Field(12, ge=1, description="At most this many files, summaries included.")
    max_tokens: int = Field(8000, ge=1, description="Total tokens over all items' text.")
    max_file_bytes: int = Field(512_000, ge=1, description="Larger files are not read at all (generated code, data).")
    summarize: bool = Field(True, description="Give a signatures-only summary of files whose full text won't fit.")


# --- reading files under a root -------------------------------------------------------------------------

class _Tree:
    """Read-only access to files under `root`, from the local disk or an fsspec filesystem."""

    def __init__(self, root: str | Path, fs: Any | None, max_bytes: int):
        self._fs = fs
        self._max_bytes = max_bytes
        self._root: Any = Path(root).resolve() if fs is None else str(root).rstrip("/")

    def _full(self, rel: str) -> Any:
        return self._root / rel if self._fs is None else f"{self._root}/{rel}"

    def is_file(self, rel: str) -> bool:
        if self._fs is not None:
            return bool(self._fs.isfile(self._full(rel)))
        path = self._full(rel)
        # A symlink may point outside the root: follow it only if it stays inside.
        return path.is_file() and path.resolve().is_relative_to(self._root)

    def read(self, rel: str) -> str | None:
        try:
            if self._fs is not None:
                if int(self._fs.size(self._full(rel)) or 0) > self._max_bytes:
                    return None
                data = self._fs.cat_file(self._full(rel))
            else:
                path = self._full(rel)
                if path.stat().st_size > self._max_bytes:
                    return None
                data = path.read_bytes()
        except OSError as e:
            logger.debug("cannot read %s: %s", rel, e)
            return None
        if b"\x00" in data[:8192]:
            return None  # binary
        return data.decode("utf-8", errors="replace")

    def relative(self, path: str) -> str | None:
        """`path` (relative, or absolute under the root) as a clean root-relative POSIX path."""
        path = path.replace("\\", "/")
        root = str(self._root).replace("\\", "/").rstrip("/")
        if path.startswith(root + "/"):
            path = path[len(root) + 1:]
        return _clean(path)


def _clean(rel: str) -> str | None:
    """A normalised root-relative path, or None when it is absolute or climbs out of the root."""
    if not rel or rel.startswith("/"):
        return None
    norm = posixpath.normpath(rel)
    if norm in (".", "..") or norm.startswith("../"):
        return None
    return norm


# --- finding seeds ------------------------------------------------------------------------------------

def find_seed_files(texts: Iterable[str], root: str | Path, *, fs: Any | None = None) -> tuple[str, ...]:
    """Existing source files named in `texts`, in order of first mention, as root-relative paths.

    Absolute paths from another checkout (`/testbed/pkg/mod.py`) are matched by their longest suffix that
    exists under `root`.
    """
    tree = _Tree(root, fs, max_bytes=1)
    found: list[str] = []
    for text in texts:
        for m in _SEED.finditer(text or ""):
            rel = _existing_suffix(tree, m.group(1))
            if rel is not None and rel not in found:
                found.append(rel)
    return tuple(found)


def _existing_suffix(tree: _Tree, mention: str) -> str | None:
    direct = tree.relative(mention)
    if direct is not None and tree.is_file(direct):
        return direct
    parts = [p for p in mention.split("/") if p not in ("", ".")]
    for i in range(1, len(parts)):
        rel = _clean("/".join(parts[i:]))
        if rel is not None and tree.is_file(rel):
            return rel
    return None


# --- import extraction --------------------------------------------------------------------------------

def _python_refs(source: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(level, module, names) per import statement, in source order; a regex fallback for broken files."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _python_refs_regex(source)
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    nodes.sort(key=lambda n: (n.lineno, n.col_offset))
    refs: list[tuple[int, str, tuple[str, ...]]] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            refs.extend((0, alias.name, ()) for alias in node.names)
        else:
            refs.append((node.level, node.module or "", tuple(a.name for a in node.names if a.name != "*")))
    return refs


_PY_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w., \t]+)", re.MULTILINE)
_PY_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([\w, \t\n]+)", re.MULTILINE)


def _python_refs_regex(source: str) -> list[tuple[int, str, tuple[str, ...]]]:
    found: list[tuple[int, int, str, tuple[str, ...]]] = []
    for m in _PY_IMPORT.finditer(source):
        for name in m.group(1).split(","):
            if name.split():
                found.append((m.start(), 0, name.split()[0], ()))
    for m in _PY_FROM.finditer(source):
        names = tuple(n.split()[0] for n in m.group(3).split(",") if n.split())
        found.append((m.start(), len(m.group(1)), m.group(2), names))
    return [(level, module, names) for _, level, module, names in sorted(found)]


def _python_targets(rel: str, source: str, tree: _Tree) -> list[str]:
    bases = ["", "src/"]
    targets: list[str] = []

    def first_existing(candidates: Iterable[str]) -> str | None:
        for candidate in candidates:
            clean = _clean(candidate)
            if clean is not None and tree.is_file(clean):
                return clean
        return None

    def module_files(prefix: str) -> list[str]:
        return [f"{prefix}.py", f"{prefix}/__init__.py", f"{prefix}.pyi"] if prefix else []

    for level, module, names in _python_refs(source):
        mod_path = module.replace(".", "/")
        if level == 0:
            prefixes = [base + mod_path for base in bases]
        else:
            package = posixpath.dirname(rel)
            for _ in range(level - 1):
                package = posixpath.dirname(package)
            prefixes = [posixpath.join(package, mod_path) if mod_path else package]
        hits: list[str | None] = []
        for name in names:  # `from pkg import mod` names a submodule when such a file exists
            hits.append(first_existing(f for p in prefixes for f in module_files(posixpath.join(p, name))))
        if not any(hits):
            hits.append(first_existing(f for p in prefixes for f in module_files(p)) if mod_path or level
                        else None)
        targets.extend(h for h in hits if h is not None)
    return targets


_JS_SPEC = re.compile(
    r"""\bfrom\s*['"]([^'"\n]+)['"]"""  # import x from '...', export * from '...'
    r"""|\bimport\s*['"]([^'"\n]+)['"]"""  # import './side-effect'
    r"""|\b(?:require|import)\s*\(\s*['"]([^'"\n]+)['"]\s*\)"""  # require('...'), import('...')
)
_JS_COMMENT = re.compile(r"/\*.*?\*/|^[ \t]*//[^\n]*", re.DOTALL | re.MULTILINE)


def _js_targets(rel: str, source: str, tree: _Tree) -> list[str]:
    targets: list[str] = []
    for m in _JS_SPEC.finditer(_JS_COMMENT.sub("", source)):
        spec = m.group(1) or m.group(2) or m.group(3)
        if not spec.startswith((".", "/")):
            continue  # a package, not a file of this repository
        base = _clean(posixpath.join(posixpath.dirname(rel), spec)) if spec.startswith(".") else _clean(spec[1:])
        if base is None:
            continue
        stem, ext = posixpath.splitext(base)
        candidates = [base] if ext in JS_EXTS else []
        if ext in (".js", ".jsx", ".mjs", ".cjs"):  # TypeScript ESM style: './x.js' names x.ts
            candidates += [stem + e for e in (".ts", ".tsx")]
        candidates += [base + e for e in JS_EXTS] + [f"{base}/index{e}" for e in JS_EXTS]
        hit = next((c for c in candidates if tree.is_file(c)), None)
        if hit is not None:
            targets.append(hit)
    return targets


def import_targets(rel: str, source: str, root: str | Path, *, fs: Any | None = None) -> list[str]:
    """Root-relative files that `rel` imports, in source order; stdlib and packages are skipped."""
    return _targets(rel, source, _Tree(root, fs, max_bytes=1))


def _targets(rel: str, source: str, tree: _Tree) -> list[str]:
    if rel.endswith(PY_EXTS):
        found = _python_targets(rel, source, tree)
    elif rel.endswith(JS_EXTS):
        found = _js_targets(rel, source, tree)
    else:
        found = []
    return list(dict.fromkeys(t for t in found if t != rel))


# --- summaries ----------------------------------------------------------------------------------------

_PY_SIG = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+|^[A-Z_][A-Z0-9_]*\s*[:=]")
_JS_SIG = re.compile(r"^\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?"
                     r"(?:function\b|class\b|interface\b|type\s+\w+\s*=|enum\b)|^(?:export\s+)?(?:const|let)\s+\w+")


def summarize_source(path: str, text: str, max_line_chars: int = 160) -> str:
    """Signature lines only (classes, functions, top-level constants), for files too big to include."""
    pattern = _PY_SIG if path.endswith(PY_EXTS) else _JS_SIG
    lines = text.splitlines()
    kept = [ln.rstrip()[:max_line_chars] for ln in lines if pattern.match(ln)]
    header = f"# {path}: signatures only ({len(lines)} lines in full)"
    return "\n".join([header, *kept])


# --- collection ---------------------------------------------------------------------------------------

def collect_code_context(seeds: Sequence[str], root: str | Path, *, priority: Sequence[str] = (),
                         settings: CodeContextSettings | None = None, count_tokens: CountTokens = approx_tokens,
                         fs: Any | None = None) -> tuple[CodeContextItem, ...]:
    """Breadth-first over imports from priority files, then seeds, within the settings' limits.

    A file that fits neither in full nor as a summary is skipped and its imports are not followed;
    smaller files later in the queue may still fit. Paths outside `root` are never read.
    """
    s = settings or CodeContextSettings()
    tree = _Tree(root, fs, s.max_file_bytes)
    queue: deque[tuple[str, int, str]] = deque()
    queued: set[str] = set()
    for reason, paths in (("priority", priority), ("seed", seeds)):
        for path in paths:
            rel = tree.relative(path)
            if rel is None or rel in queued or not tree.is_file(rel):
                logger.debug("code context: skipping %s %r (missing, duplicate or outside the root)", reason, path)
                continue
            queued.add(rel)
            queue.append((rel, 0, reason))

    items: list[CodeContextItem] = []
    used = 0
    while queue and len(items) < s.max_files:
        rel, depth, reason = queue.popleft()
        source = tree.read(rel)
        if source is None:
            continue
        item = _fit(rel, depth, reason, source, s.max_tokens - used, s.summarize, count_tokens)
        if item is None:
            logger.debug("code context: %s does not fit in %d tokens", rel, s.max_tokens - used)
            continue
        items.append(item)
        used += item.tokens
        if depth < s.max_depth:
            for target in _targets(rel, source, tree):
                if target not in queued:
                    queued.add(target)
                    queue.append((target, depth + 1, f"imported by {rel}"))
    logger.debug("code context: %d files, %d tokens from %d seeds", len(items), used, len(seeds))
    return tuple(items)


def _fit(rel: str, depth: int, reason: str, source: str, room: int, summarize: bool,
         count_tokens: CountTokens) -> CodeContextItem | None:
    tokens = count_tokens(source)
    if tokens <= room:
        return CodeContextItem(rel, depth, tokens, source, reason)
    if summarize:
        summary = summarize_source(rel, source)
        tokens = count_tokens(summary)
        if tokens <= room:
            return CodeContextItem(rel, depth, tokens, summary, reason, summarized=True)
    return None
