#!/usr/bin/env python3
"""Checks that tsumiki's modules import downward only (docs/design.md, "Layers").

The rule, as a table of the top-level modules each module may import (`ALLOWED`):

    error, block  <-  index, mvcc, cc  <-  wal  <-  store  <-  db

`error` and `block` import nothing of the crate's but each other's leaves (`block` may use
`error`); in the middle tier `cc` may use `mvcc` (MVCC-SI's garbage collectors) and nothing
else of its tier; `wal` logs `cc`'s write sets and bounds keys by `index::MAX_KEY_LEN`.
The crate root (`lib.rs`) re-exports from every layer, so an import of a root name
(`crate::Db`) counts as an import of the module the name comes from.

Found: `use crate::...;` and `use super::...;` declarations (braces and line breaks
included) and inline `crate::x::` / `super::x::` paths in code; comments, doc comments
and string literals are skipped. Unit-test modules (`#[cfg(test)] mod ... { }`, or a file
declared `#[cfg(test)] mod tests;`) may build fixtures with any layer: their upward imports
are listed but allowed.

Also fails on a cycle between sibling files of one module (`index/mapping.rs` <->
`index/node.rs`): within a module, files depend one way too.

Usage: scripts/check-layers.py [--src crates/tsumiki/src] [--self-test]
Exit status 0: clean; 1: violations (each named file:line); 2: usage or parse error.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The top-level modules each module may import (besides itself). Keep in step with
# docs/design.md's "Layers" paragraph.
# The floor: the limits, the error type and the option names, the test plants, the owner of
# background threads, the storage, the block format, the bounded byte reader (`decode`) and
# the cache-line prefetches, and the slab (records and key blocks on huge pages).
# Every layer above may use all of it.
FLOOR = {"limits", "error", "names", "plants", "background", "storage", "block", "decode", "prefetch", "slab"}
ALLOWED = {
    "limits": set(),
    "plants": set(),
    "prefetch": set(),
    "slab": set(),
    "background": set(),
    "error": {"limits"},
    "names": {"error"},
    "storage": {"error", "limits"},
    "block": {"error"},
    "decode": {"error"},
    "index": FLOOR,
    "mvcc": FLOOR,
    "cc": FLOOR | {"mvcc"},
    "wal": FLOOR | {"index", "mvcc", "cc"},
    "store": FLOOR | {"index", "mvcc", "cc", "wal"},
    "db": FLOOR | {"index", "mvcc", "cc", "wal", "store"},
}
ROOT = "<root>"

SRC_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "tsumiki", "src")


def strip_code(text):
    """`text` with comments and the contents of string and char literals blanked to
    spaces (newlines kept, so offsets and line numbers stay)."""
    out = list(text)
    i, n = 0, len(text)

    def blank(a, b):
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            start = i + 2 + len(hashes)
            end = text.find('"' + hashes, start)
            end = n if end < 0 else end
            blank(start, end)
            i = end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}', '"') or a lifetime ('a).
            m = re.match(r"'(\\[^']{1,10}|[^\\'])'", text[i:i + 14])
            if m:
                blank(i + 1, i + m.end() - 1)
                i += m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def module_of(rel):
    """The module path of a source file, relative to src (lib.rs: [])."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return parts


def matching_brace(code, at):
    depth = 0
    for j in range(at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def inline_modules(code):
    """Spans of inline `mod name { }` blocks: (start, end, name, is_test)."""
    spans = []
    for m in re.finditer(r"\bmod\s+([A-Za-z_]\w*)\s*\{", code):
        brace = m.end() - 1
        end = matching_brace(code, brace)
        before = code[max(0, m.start() - 200):m.start()]
        is_test = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s*)?$", before) is not None
        spans.append((m.start(), end, m.group(1), is_test))
    return spans


def scope_at(file_mod, spans, off):
    """The module path at offset `off`, and whether it lies in a test module."""
    path, test = list(file_mod), False
    for start, end, name, is_test in spans:
        if start <= off <= end:
            path.append(name)
            test = test or is_test
    return path, test


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)  # aliases do not change the target
    tree = re.sub(r"\s+", "", tree)
    # Split at top-level '{'.
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix = tree[:brace]
    inner = tree[brace + 1:tree.rfind("}")]
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    items.append(cur)
    out = []
    for it in items:
        if it:
            out.extend(prefix + sub for sub in expand_use_tree(it))
    return out


def root_reexports(lib_code):
    """Names the crate root re-exports (`pub use db::{Db, ..}`) -> their top-level module."""
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+([^;]+);", lib_code):
        tree = m.group(1)
        module = re.sub(r"\s+", "", tree).removeprefix("crate::").split("::")[0]
        for alias in re.findall(r"\bas\s+(\w+)", tree):
            names[alias] = module
        for path in expand_use_tree(tree):
            names[path.split("::")[-1]] = module
    return names


def root_items(lib_code):
    """Names of the items the crate root itself defines."""
    kinds = r"(?:struct|enum|union|trait|type|fn|const|static|mod)"
    return set(re.findall(r"\b" + kinds + r"\s+(\w+)", lib_code)) | set(re.findall(r"macro_rules!\s*(\w+)", lib_code))


def resolve(path, scope, top_modules, reexports):
    """The target module path of an import path (`crate::a::b`, `super::x`), or None if it
    names no module of the crate (a local item, an external crate)."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        rest = segs[1:]
        if not rest or rest[0] == "self":
            return [ROOT]
        if rest[0] in top_modules:
            return rest
        if rest[0] in reexports:
            return [reexports[rest[0]]] + rest[1:]
        return [ROOT] + rest
    if segs[0] in ("super", "self"):
        cur = list(scope)
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                if not cur:
                    return None
                cur.pop()
            segs = segs[1:]
        return cur + segs if cur else ([ROOT] + segs)
    return None


class Finding:
    def __init__(self, file, line, src, dst, text, test):
        self.file, self.line, self.src, self.dst, self.text, self.test = file, line, src, dst, text, test


def scan(src_dir):
    """Every cross-module import: a list of Finding (src and dst are module paths)."""
    files = []
    for dirpath, _, names in os.walk(src_dir):
        for name in names:
            if name.endswith(".rs"):
                files.append(os.path.relpath(os.path.join(dirpath, name), src_dir))
    files.sort()
    # Every top-level module with a file: one missing from the table is reported, not
    # taken for an item of the crate root.
    top_modules = set(ALLOWED) | {module_of(rel)[0] for rel in files if module_of(rel)}
    lib = os.path.join(src_dir, "lib.rs")
    if not os.path.exists(lib):
        raise SystemExit(f"check-layers: no lib.rs in {src_dir}")
    with open(lib, encoding="utf-8") as f:
        lib_code = strip_code(f.read())
    reexports = root_reexports(lib_code)
    # Every name the crate root holds; a `crate::X` naming none of them is reported.
    known = top_modules | set(reexports) | root_items(lib_code)
    codes = {}
    for rel in files:
        with open(os.path.join(src_dir, rel), encoding="utf-8") as f:
            codes[rel] = strip_code(f.read())
    # Modules whose file is declared `#[cfg(test)] mod name;`: test modules, as inline ones.
    test_files = set()
    for rel, code in codes.items():
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s*)?mod\s+([A-Za-z_]\w*)\s*;", code):
            test_files.add(tuple(module_of(rel) + [m.group(1)]))
    found = []
    for rel in files:
        code = codes[rel]
        file_mod = module_of(rel)
        file_test = any(tuple(file_mod[:k]) in test_files for k in range(1, len(file_mod) + 1))
        spans = inline_modules(code)
        line_of = lambda off: code.count("\n", 0, off) + 1  # noqa: E731
        seen = set()
        use_spans = []
        for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", code):
            use_spans.append((m.start(), m.end()))
            scope, test = scope_at(file_mod, spans, m.start())
            test = test or file_test
            for path in expand_use_tree(m.group(1)):
                path = re.split(r"\bas\b", path)[0]
                if path.endswith("::*"):
                    path = path[:-3]
                if path.endswith("::self"):
                    path = path[:-6]
                dst = resolve(path, scope, top_modules, reexports)
                if dst is not None and dst[0] == ROOT and len(dst) > 1 and dst[1] not in known:
                    found.append(Finding(rel, line_of(m.start()), scope, ["<unresolved>"], path, False))
                elif dst is not None:
                    key = (line_of(m.start()), tuple(dst))
                    if key not in seen:
                        seen.add(key)
                        found.append(Finding(rel, key[0], scope, dst, path, test))
        for m in re.finditer(r"(?<![\w:$])\$?((?:crate|super)(?:::\w+)+)", code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            scope, test = scope_at(file_mod, spans, m.start())
            test = test or file_test
            dst = resolve(m.group(1), scope, top_modules, reexports)
            if dst is not None and dst[0] == ROOT and len(dst) > 1 and dst[1] not in known and m.group(1).startswith("crate"):
                found.append(Finding(rel, line_of(m.start()), scope, ["<unresolved>"], m.group(1), False))
            elif dst is not None:
                key = (line_of(m.start()), tuple(dst))
                if key not in seen:
                    seen.add(key)
                    found.append(Finding(rel, key[0], scope, dst, m.group(1), test))
    return found


def top(path):
    return path[0] if path else ROOT


def file_modules(src_dir):
    """The module paths that are files (`index/node.rs` -> ("index", "node"))."""
    mods = set()
    for dirpath, _, names in os.walk(src_dir):
        for name in names:
            if name.endswith(".rs"):
                mods.add(tuple(module_of(os.path.relpath(os.path.join(dirpath, name), src_dir))))
    return mods


def check(src_dir, out=sys.stdout):
    """Prints every violation; returns their number."""
    found = scan(src_dir)
    files = file_modules(src_dir)
    errors = 0
    sibling_edges = {}
    for f in found:
        s, d = top(f.src), top(f.dst)
        if d == "<unresolved>":
            print(f"{f.file}:{f.line}: `{f.text}` names nothing the crate root defines or re-exports by name (a glob re-export?): cannot check it", file=out)
            errors += 1
            continue
        if s == ROOT or d == ROOT or s == d:
            sibling = len(f.src) >= 2 and len(f.dst) >= 2 and f.src[1] != f.dst[1] and tuple(f.dst[:2]) in files
            if s == d and s != ROOT and sibling and not f.test:
                sibling_edges.setdefault((s, f.src[1], f.dst[1]), []).append(f)
            continue
        if s not in ALLOWED:
            print(f"{f.file}:{f.line}: module `{s}` is not in the layer table (scripts/check-layers.py ALLOWED)", file=out)
            errors += 1
            continue
        if d not in ALLOWED:
            print(f"{f.file}:{f.line}: `{f.text}` names `{d}`, which is not in the layer table", file=out)
            errors += 1
            continue
        if d in ALLOWED[s]:
            continue
        via = "" if f.text.split("::")[1:2] == [d] else f" (a crate-root re-export of `{d}`)"
        if f.test:
            print(f"note: {f.file}:{f.line}: test module imports `{f.text}`{via}: `{s}` -> `{d}` (allowed in tests)", file=out)
            continue
        print(
            f"{f.file}:{f.line}: upward import `{f.text}`{via}: `{s}` may not import `{d}` "
            f"(`{s}` may import: {', '.join(sorted(ALLOWED[s])) or 'nothing'}; see docs/design.md, Layers)",
            file=out,
        )
        errors += 1
    # Cycles between sibling files of one module.
    for mod in sorted({k[0] for k in sibling_edges}):
        graph = {}
        for (m, a, b) in sibling_edges:
            if m == mod:
                graph.setdefault(a, set()).add(b)
        for cycle in cycles(graph):
            where = []
            for a, b in zip(cycle, cycle[1:] + cycle[:1]):
                f = sibling_edges[(mod, a, b)][0]
                where.append(f"{f.file}:{f.line} ({a} -> {b})")
            print(f"module cycle in `{mod}`: {' -> '.join(cycle + cycle[:1])}: " + "; ".join(where), file=out)
            errors += 1
    return errors


def cycles(graph):
    """One cycle (as a node list) per strongly connected component of over one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
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
                out.append(path_cycle(graph, set(comp)))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def path_cycle(graph, comp):
    """A simple cycle through the component's smallest node."""
    startv = min(comp)
    prev, queue = {startv: None}, [startv]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in comp:
                continue
            if w == startv:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return path[::-1]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return sorted(comp)


def self_test(src_dir):
    """Plants violations in copies of the tree; each must fail naming its file:line."""
    if check(src_dir, out=open(os.devnull, "w")) != 0:
        print("self-test: the real tree must pass first (run without --self-test)")
        return 1
    plants = [
        # (file, text appended, expected message part)
        ("index/tree/mod.rs", "\nuse crate::wal::format::BLOCK;\n", "upward import `crate::wal::format::BLOCK`"),
        ("wal/mod.rs", "\nfn planted() -> usize {\n    crate::store::pages::PAGE_TARGET\n}\n", "`wal` may not import `store`"),
        ("store/pages.rs", "\nuse crate::{\n    Db,\n    Options,\n};\n", "a crate-root re-export of `db`"),
        ("cc/mod.rs", "\npub(crate) use crate::wal::Wal as PlantedWal;\n", "`cc` may not import `wal`"),
        ("mvcc/mod.rs", "\nuse crate::cc::Protocol as PlantedProtocol;\n", "`mvcc` may not import `cc`"),
        ("index/mod.rs", "\npub(crate) fn planted(_: &crate::Db) {}\n", "`index` may not import `db`"),
        ("wal/format.rs", "\nuse crate::page_fuzz::decode_image;\n", "`wal` may not import `store`"),
        ("block.rs", "\nmacro_rules! planted {\n    () => {\n        $crate::wal::Wal\n    };\n}\n", "`block` may not import `wal`"),
        ("index/mapping.rs", "\nuse super::tree::Tree as PlantedTree;\n", "module cycle in `index`"),
    ]
    # Not violations: the same text inside a comment, a string or a test module.
    benign = [
        ("index/tree/mod.rs", "\n// use crate::db::Db;\n/// crate::store::pages::PAGE_TARGET\nconst PLANTED: &str = \"crate::db::x\";\n"),
        ("store/inspect.rs", "\n#[cfg(test)]\nmod planted_tests {\n    use crate::{Db, Options};\n}\n"),
    ]
    def run_planted(rel, text):
        """Runs the check on a copy of the tree with `text` appended to `rel` (which must
        exist: a plant in a new file would test nothing the crate compiles)."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "src")
            shutil.copytree(src_dir, copy)
            path = os.path.join(copy, rel)
            if not os.path.exists(path):
                raise SystemExit(f"self-test: {rel} does not exist; plant into a real file")
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
            return subprocess.run([sys.executable, os.path.abspath(__file__), "--src", copy], capture_output=True, text=True)

    failures = 0
    for rel, text, want in plants:
        res = run_planted(rel, text)
        said = [ln for ln in res.stdout.splitlines() if want in ln and rel in ln and not ln.startswith("note:")]
        ok = res.returncode == 1 and bool(said)
        print(f"self-test: planted in {rel}: {'caught' if ok else 'MISSED'}: {(said or res.stdout.splitlines()[-1:])[0]}")
        failures += not ok
    for rel, text in benign:
        res = run_planted(rel, text)
        ok = res.returncode == 0
        print(f"self-test: benign text in {rel}: {'passes' if ok else 'FALSE ALARM: ' + res.stdout.strip()}")
        failures += not ok
    print("self-test: " + ("ok" if failures == 0 else f"{failures} FAILED"))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=SRC_DEFAULT, help="the crate's src directory")
    ap.add_argument("--self-test", action="store_true", help="plant violations in a copy and check they fail")
    args = ap.parse_args()
    src = os.path.normpath(args.src)
    if args.self_test:
        sys.exit(self_test(src))
    errors = check(src)
    if errors:
        print(f"check-layers: {errors} violation(s) of the layer rule in {src}")
        sys.exit(1)
    print(f"check-layers: ok ({src})")


if __name__ == "__main__":
    main()
