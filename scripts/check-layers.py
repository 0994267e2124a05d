#!/usr/bin/env python3
"""The import graph of a crate runs one way: `make lint` runs this.

    scripts/check-layers.py [--ordered] [--allow-cycle A,B]... CRATE_ROOT_FILE...

For each crate root (src/lib.rs, cli/src/main.rs, bench/src/main.rs) it
reads every module file under it, collects the paths each file names
(`use crate::...`, `use super::...`, grouped `use` trees, and inline
`crate::a::b` / `super::a` paths in code), and reduces each reference to an
edge between two *sibling* modules: `crate::hub::registry` naming
`crate::conn::Watched` is the edge hub -> conn; a child naming its parent,
or a parent its child, is no edge (a module and its own submodules are one
room). Inline `mod x { ... }` blocks count as part of their file's module,
so `#[cfg(test)] mod tests { use super::*; }` names nothing outside.

Two checks:
  * no cycle among the siblings of any module (every root);
  * with `--ordered`, the root's `mod` list is the layering, from the bottom
    up: no module names one declared after it in the root file (`src/lib.rs`
    lists its modules this way; the CLI's and the bench's are alphabetical).

`--allow-cycle soak::runner,soak::worker` tolerates a known cycle of exactly
those modules (printed as a warning, and as a note to drop the flag once the
cycle is gone), so the check can run in `make lint` before a fix lands.

Exit status 1 and one line per finding when either fails. No dependency
beyond Python 3's standard library; a regex reader, not a Rust parser, so
`#[path]` attributes and macros that build paths are not followed (the
workspace uses neither).
"""

import os
import re
import sys

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
PATH = re.compile(r"\b(crate|super|self)((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)")


def strip(src):
    """Source without comments, string and char literals (kept line-aligned)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if src[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", src[i:]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def use_trees(code):
    """The paths of every `use` item, grouped trees expanded."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]*);", code):
        paths.extend(expand(re.sub(r"\s+", "", m.group(1))))
    return paths


def expand(tree):
    """`a::{b,c::{d,e}}` -> [a::b, a::c::d, a::c::e] (as lists of segments)."""
    brace = tree.find("{")
    if brace < 0:
        head = re.sub(r"\bas\w+$", "", tree)
        return [[s for s in head.split("::") if s and s != "*"]]
    prefix = [s for s in tree[:brace].split("::") if s]
    body, depth, parts, cur = tree[brace + 1 : tree.rfind("}")], 0, [], ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for part in parts:
        if part:
            for sub in expand(part):
                out.append(prefix + sub)
    return out or [prefix]


def modules(root_file):
    """{module path tuple: file} for every module file under the crate root."""
    found = {}

    def walk(path, file):
        found[path] = file
        with open(file) as f:
            code = strip(f.read())
        here = os.path.dirname(file)
        base = os.path.basename(file)
        if path and base not in ("mod.rs",):
            here = os.path.join(here, os.path.splitext(base)[0])
        for name in MOD_DECL.findall(code):
            for cand in (os.path.join(here, name + ".rs"), os.path.join(here, name, "mod.rs")):
                if os.path.exists(cand):
                    walk(path + (name,), cand)
                    break

    walk((), root_file)
    return found


def edges(mods):
    """{(a, b)}: sibling module a names sibling module b."""
    out = {}
    for here, file in mods.items():
        with open(file) as f:
            code = strip(f.read())
        # The file's own `mod x;` lines are declarations, not uses.
        code = MOD_DECL.sub("", code)
        refs = use_trees(code)
        for m in PATH.finditer(re.sub(r"\buse\s+[^;]*;", "", code)):
            refs.append([m.group(1)] + [s for s in re.split(r"\s*::\s*", m.group(2)) if s])
        for segs in refs:
            if not segs or segs[0] not in ("crate", "super", "self"):
                # Bare paths name children (no edge) or external crates.
                continue
            target = resolve(segs, here, mods)
            if target is None:
                continue
            common = 0
            while common < min(len(here), len(target)) and here[common] == target[common]:
                common += 1
            if common == len(here) or common == len(target):
                continue  # a module and its ancestor or descendant
            a, b = here[: common + 1], target[: common + 1]
            out.setdefault((a, b), set()).add(file)
    return out


def resolve(segs, here, mods):
    """The longest module path a `crate::`/`super::`/`self::` path names."""
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    else:
        base, rest = here, list(segs)
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
    path = base
    for seg in rest:
        if path + (seg,) in mods:
            path = path + (seg,)
        else:
            break
    return path


def cycles(graph_edges):
    """Strongly connected components of more than one module."""
    nodes = sorted({n for e in graph_edges for n in e})
    succ = {n: sorted(b for (a, b) in graph_edges if a == n) for n in nodes}
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
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
                comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return comps


def name(path):
    return "::".join(path) or "crate"


def main(argv):
    ordered, allowed, roots = False, [], []
    args = iter(argv)
    for a in args:
        if a == "--ordered":
            ordered = True
        elif a == "--allow-cycle":
            allowed.append(sorted(tuple(m.split("::")) for m in next(args, "").split(",")))
        else:
            roots.append(a)
    used = []
    if not roots:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = 0
    for root in roots:
        mods = modules(root)
        graph = edges(mods)
        for comp in cycles(graph):
            if comp in allowed:
                used.append(comp)
                print(f"{root}: warning: known import cycle tolerated: {' <-> '.join(name(m) for m in comp)}")
                continue
            bad += 1
            print(f"{root}: import cycle: {' <-> '.join(name(m) for m in comp)}")
            for a in comp:
                for b in comp:
                    if (a, b) in graph:
                        files = ", ".join(sorted(graph[(a, b)]))
                        print(f"    {name(a)} -> {name(b)} ({files})")
        if ordered:
            with open(root) as f:
                order = MOD_DECL.findall(strip(f.read()))
            rank = {(m,): i for i, m in enumerate(order)}
            for (a, b), files in sorted(graph.items()):
                if len(a) == 1 and a in rank and b in rank and rank[b] > rank[a]:
                    bad += 1
                    print(
                        f"{root}: {name(a)} uses {name(b)}, declared below it "
                        f"({', '.join(sorted(files))})"
                    )
        print(f"{root}: {len(mods)} modules, {len(graph)} sibling edges", file=sys.stderr)
    for comp in allowed:
        if comp not in used:
            print(f"note: {' <-> '.join(name(m) for m in comp)} is no cycle any more: drop its --allow-cycle")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
