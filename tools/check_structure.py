#!/usr/bin/env python3
"""Checks two house rules that review keeps missing.

1. No import circles between the modules of a Rust crate. A module depends on another when its
   code names a path into it (`crate::a::b`, `super::x`, `child::Item`); a `pub use` re-export is
   followed to the module that defines the item, and the crate root is a facade (its re-exports
   are not edges). Test modules (`#[cfg(test)]`) are left out: tests may look anywhere.
2. No function longer than `--max-lines` lines outside tests, in the Rust crates and the Python
   package.

Prints each circle (its modules in order) and each long function, and exits 1 if there is any.
`--report` prints the crates' module counts and the longest functions even when all is well.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = [
    "stoker-core",
    "stoker-formats",
    "stoker-ops",
    "stoker",
    "stoker-analyze",
    "stoker-html",
    "stoker-cli",
    "stoker-python",
]
PY_PACKAGE = ROOT / "crates/stoker-python/python/stoker"

_TOKEN = re.compile(
    r"""
    (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*)
  | (?P<raw_string>b?r(?P<hashes>\#*)")
  | (?P<string>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\.|[^'\\])')
  """,
    re.VERBOSE | re.DOTALL,
)


def strip_rust(text: str) -> str:
    """`text` with comments, strings and character literals blanked (newlines kept)."""
    out: list[str] = []
    i = 0
    while True:
        m = _TOKEN.search(text, i)
        if m is None:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        if m.group("block_comment"):
            depth, j = 1, m.end()
            while depth and j < len(text):
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            end = j
        elif m.group("raw_string") is not None and m.group("raw_string"):
            close = '"' + m.group("hashes")
            found = text.find(close, m.end())
            end = len(text) if found < 0 else found + len(close)
        else:
            end = m.end()
        out.append(re.sub(r"[^\n]", " ", text[m.start() : end]))
        i = end


def without_tests(code: str) -> str:
    """`code` (stripped) with every `#[cfg(test)]` item blanked."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code)
        if m is None:
            return code
        end = matching_brace(code, m.end() - 1)
        code = code[: m.start()] + re.sub(r"[^\n]", " ", code[m.start() : end + 1]) + code[end + 1 :]


def matching_brace(code: str, open_at: int) -> int:
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def module_of(src: Path, file: Path) -> tuple[str, ...]:
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    return tuple(parts)


def rust_modules(src: Path) -> dict[tuple[str, ...], str]:
    """Module path -> its code (stripped, tests blanked), for the files of one crate."""
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        if "bin" in f.relative_to(src).parts:
            continue
        mods[module_of(src, f)] = without_tests(strip_rust(f.read_text()))
    return mods


_PATH = re.compile(r"\b((?:crate|super|self)(?:::\w+)+|[a-z_]\w*(?:::\w+)+)")
_USE = re.compile(r"\buse\s+([^;]+);")


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)::\{(.*)\}$", tree)
    if not m:
        return [re.sub(r"as\w+$", "", tree)]
    prefix, inner = m.groups()
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        out += [prefix if p == "self" else f"{prefix}::{q}" for q in expand_use(p)]
    return out


def resolve(path: str, here: tuple[str, ...], mods: dict) -> tuple[str, ...] | None:
    segs = path.split("::")
    if segs[0] == "crate":
        base: tuple[str, ...] = ()
        segs = segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif here + (segs[0],) in mods:
        base = here
    else:
        return None
    target = base
    for s in segs:
        if target + (s,) in mods:
            target = target + (s,)
        else:
            break
    return target


def rust_graph(src: Path) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    mods = rust_modules(src)
    # Re-exports: (module, name) -> the module that defines it.
    reexport: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {}
    for here, code in mods.items():
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", code):
            for p in expand_use(m.group(1)):
                t = resolve(p, here, mods)
                if t is not None and t != here:
                    reexport[(here, p.split("::")[-1])] = t

    def target_of(p: str, here: tuple[str, ...]) -> tuple[str, ...] | None:
        t = resolve(p, here, mods)
        if t is None:
            return None
        rest = p.split("::")
        name = rest[-1]
        seen = 0
        while (t, name) in reexport and seen < 8:
            t, seen = reexport[(t, name)], seen + 1
        return t

    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for here, code in mods.items():
        graph[here]
        paths = []
        for m in _USE.finditer(code):
            if re.search(r"\bpub(\([^)]*\))?\s+$", code[max(0, m.start() - 12) : m.start()]):
                continue  # a re-export: followed above, not an edge
            paths += expand_use(m.group(1))
        body = _USE.sub(" ", code)
        body = re.sub(r"\b(pub(\([^)]*\))?\s+)?mod\s+\w+\s*;", " ", body)
        paths += [m.group(1) for m in _PATH.finditer(body)]
        for p in paths:
            t = target_of(p, here)
            if t is None or t == here or t == ():
                continue
            # A module's path to its own child through `self::child` is still an edge.
            graph[here].add(t)
    return graph


def cycles(graph: dict) -> list[list]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    out: list[list] = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def rust_functions(path: Path) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of every function outside tests in one file."""
    code = without_tests(strip_rust(path.read_text()))
    out = []
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        j = m.end()
        depth = 0
        while j < len(code):
            c = code[j]
            if c in "([<":
                depth += 1
            elif c in ")]>":
                depth -= 1
            elif c == ";" and depth <= 0:
                j = -1
                break
            elif c == "{" and depth <= 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        end = matching_brace(code, j)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        out.append((m.group(1), first, last - first + 1))
    return out


def python_functions(path: Path) -> list[tuple[str, int, int]]:
    tree = ast.parse(path.read_text())
    return [
        (n.name, n.lineno, (n.end_lineno or n.lineno) - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-lines", type=int, default=120)
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    bad = 0
    for crate in CRATES:
        src = ROOT / "crates" / crate / "src"
        graph = rust_graph(src)
        found = cycles(graph)
        edges = sum(len(v) for v in graph.values())
        if args.report or found:
            print(f"{crate}: {len(graph)} modules, {edges} edges, {len(found)} circle(s)")
        for comp in found:
            bad += 1
            names = ", ".join("::".join(m) or "crate" for m in comp)
            print(f"  circle of {len(comp)}: {names}")
    long: list[tuple[int, str]] = []
    for crate in CRATES:
        for f in sorted((ROOT / "crates" / crate / "src").rglob("*.rs")):
            for name, line, n in rust_functions(f):
                long.append((n, f"{f.relative_to(ROOT)}:{line} {name}"))
    for f in sorted(PY_PACKAGE.rglob("*.py")):
        for name, line, n in python_functions(f):
            long.append((n, f"{f.relative_to(ROOT)}:{line} {name}"))
    long.sort(reverse=True)
    over = [x for x in long if x[0] > args.max_lines]
    for n, where in over:
        bad += 1
        print(f"function of {n} lines (over {args.max_lines}): {where}")
    if args.report:
        print("longest functions:")
        for n, where in long[:10]:
            print(f"  {n:4d} {where}")
    if bad:
        print(f"{bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
