#!/usr/bin/env python3
"""Layout checks of src/ (ctest `layout_check`, label unit; a second or less).

1. Layers: every `#include "dir/file.h"` in src/ against the layer table of README.md
   (section "Design", "Layers depend downward only": columns layer | directory | may include |
   what). A file of layer L may include its own layer and the layers in L's "may include"
   column only. The table itself must be acyclic and closed (a layer lists what its layers
   list), and the table in docs/architecture.md ("Layers") must say the same.
2. Function length: no function body in src/ longer than MAX_FUNCTION_LINES lines, counted
   from the line of its opening brace to the line of its closing one (a brace-matching
   scanner that skips comments, string and character literals; lambdas count in the
   function that holds them).

Each offence is printed as file:line. KNOWN_INCLUDES and KNOWN_LONG_FUNCTIONS list today's
offences that other changes are removing; an entry that no longer matches anything is an
error too, so that it is deleted when its fix lands. Before checking the tree the script
checks itself on a small synthetic tree (an upward include and a long function must be
found).

Usage: check_layout.py [--root DIR]   (DIR: the checkout, default: two levels up)
Exit status 0 when clean, 1 with offences, 2 when README.md has no usable table.
"""
import argparse
import pathlib
import re
import sys
import tempfile

MAX_FUNCTION_LINES = 90

# Known upward includes: (file, included header) -> why, and what removes it. CMakeLists.txt
# marks the matching links "# upward, removed by ...".
KNOWN_INCLUDES = {}

# Known long functions: (file, function name as the scanner reports it) -> why.
KNOWN_LONG_FUNCTIONS = {}

# Included names without a directory that are not in the includer's directory.
GENERATED = {"virtlink_version.h": "util"}  # configured from src/util/version.h.in

SOURCE_SUFFIXES = (".h", ".cpp", ".h.in")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


# --- the layer table ----------------------------------------------------------------------

def read_layers(readme):
    """{layer: (directory, set of layers it may include)} from README.md's table."""
    text = readme.read_text()
    start = text.find("Layers depend downward only")
    if start < 0:
        raise ValueError(f"{readme}: no 'Layers depend downward only' section")
    layers = {}
    in_table = False
    for line in text[start:].splitlines()[1:]:
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or cells[0] in ("layer", "") or set(cells[0]) <= set("-: "):
            continue
        m = re.fullmatch(r"`src/([\w]+)/`", cells[1])
        if not m:
            raise ValueError(f"{readme}: layer {cells[0]}: directory {cells[1]!r} "
                             "is not `src/DIR/`")
        deps = {d.strip() for d in cells[2].split(",")} - {"", "-", "—", "none"}
        layers[cells[0]] = (m.group(1), deps)
    if not layers:
        raise ValueError(f"{readme}: the layer table has no rows")
    return layers


def doc_table_errors(root, layers):
    """docs/architecture.md's layer table (section "Layers") must say what README.md's does."""
    doc = root / "docs" / "architecture.md"
    if not doc.exists():
        return []
    text = doc.read_text()
    if "\n## Layers" not in text:
        return [f"{doc.relative_to(root)}: no '## Layers' section"]
    section = text[text.index("\n## Layers"):]
    tmp = "Layers depend downward only\n" + section.split("\n## ", 2)[1]
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "architecture.md"
        p.write_text(tmp)
        try:
            theirs = read_layers(p)
        except ValueError as e:
            return [f"docs/architecture.md: {str(e).split(': ', 1)[1]}"]
    errs = []
    for name in sorted(layers.keys() | theirs.keys()):
        ours, doc_row = layers.get(name), theirs.get(name)
        if ours != doc_row:
            show = lambda r: "no row" if r is None else f"src/{r[0]}/, may include {sorted(r[1])}"
            errs.append(f"docs/architecture.md: layer {name}: {show(doc_row)}; "
                        f"README.md: {show(ours)}")
    return errs


def table_errors(layers):
    """Unknown names, cycles and missing transitive entries in the table."""
    errs = []
    for name, (_, deps) in layers.items():
        for d in sorted(deps - layers.keys()):
            errs.append(f"README.md: layer {name} may include unknown layer {d}")
    for name, (_, deps) in layers.items():
        if name in deps:
            errs.append(f"README.md: layer {name} lists itself")
        for d in sorted(deps & layers.keys()):
            if name in layers[d][1]:
                errs.append(f"README.md: layers {name} and {d} include each other")
            for dd in sorted(layers[d][1] - deps - {name}):
                errs.append(f"README.md: layer {name} may include {d}, which may include {dd}: "
                            f"list {dd} for {name} too")
    return errs


def include_errors(root, layers, known):
    """(offences, known entries used) for every quoted #include in src/."""
    by_dir = {d: name for name, (d, _) in layers.items()}
    offences, used = [], set()
    for path in sorted((root / "src").rglob("*")):
        if not path.is_file() or not path.name.endswith(SOURCE_SUFFIXES):
            continue
        rel = path.relative_to(root).as_posix()
        parts = path.relative_to(root / "src").parts
        layer = by_dir.get(parts[0]) if len(parts) > 1 else None
        if layer is None:
            offences.append(f"{rel}:1: directory src/{parts[0]} is in no layer of README.md")
            continue
        allowed = layers[layer][1] | {layer}
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE_RE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if "/" in inc:
                target = by_dir.get(inc.split("/")[0])
            elif inc in GENERATED:
                target = GENERATED[inc]
            elif (path.parent / inc).exists():
                target = layer
            else:
                target = None
            if target is None:
                offences.append(f"{rel}:{n}: #include \"{inc}\": not in any layer")
            elif target not in allowed:
                if (rel, inc) in known:
                    used.add((rel, inc))
                    continue
                offences.append(f"{rel}:{n}: #include \"{inc}\": layer {layer} may not include "
                                f"layer {target} (may include: {', '.join(sorted(allowed))})")
    return offences, used


# --- function length ------------------------------------------------------------------------

def strip_code(src):
    """The source with comments and string/character literals blanked, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if c == "#" and src[src.rfind("\n", 0, i) + 1:i].strip() == "":  # a directive
            j = i
            while True:
                j = src.find("\n", j)
                if j < 0 or src[j - 1] != "\\":
                    break
                j += 1
            j = n if j < 0 else j
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        m = re.match(r'R"([^(\s]*)\(', src[i:i + 20]) if c == "R" else None
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = src.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
            continue
        if c in "\"'":
            if c == "'" and i > 0 and src[i - 1].isalnum():  # digit separator: 1'000
                i += 1
                continue
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "try", "return", "sizeof",
           "decltype", "alignas", "alignof", "static_assert", "noexcept", "requires", "defined"}
AFTER_PARAMS = re.compile(r"\)\s*(const|noexcept|override|final|mutable|&|&&|\s|"
                          r"->\s*[\w:<>,\s\*&]+)*$")


def function_name(prefix):
    """The name of the function whose body opens after `prefix` (the text since the last
    `;`, `{` or `}`), or None when the brace opens something else. A function's head ends
    with its parameter list (and qualifiers), or with a constructor's initializer list."""
    head = re.sub(r"\s+", " ", prefix).strip()
    if not AFTER_PARAMS.search(head):
        return None
    depth, first_open = 0, None
    for j, c in enumerate(head):
        if c == "(":
            if depth == 0 and first_open is None:
                first_open = j
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return None  # inside an unclosed call: a lambda argument
    if depth != 0 or first_open is None:
        return None
    nm = re.search(r"(operator\s*[^\s(]+|[\w:~]+|\])\s*$", head[:first_open])
    if not nm or nm.group(1) == "]" or nm.group(1) in CONTROL:
        return None
    return nm.group(1)


def long_functions(path, limit):
    """[(lines, first line, name)] of the outermost functions in `path` above `limit` lines."""
    s = strip_code(path.read_text())
    found, stack, last = [], [], 0
    line = 1
    for i, c in enumerate(s):
        if c == "\n":
            line += 1
        elif c == "{":
            name = None
            if not any(fn for fn, _ in stack):
                name = function_name(s[last:i])
            stack.append((name, line))
            last = i + 1
        elif c == "}":
            if stack:
                name, first = stack.pop()
                if name and line - first + 1 > limit:
                    found.append((line - first + 1, first, name))
            last = i + 1
        elif c == ";":
            last = i + 1
    return found


def length_errors(root, known, limit):
    offences, used = [], set()
    for path in sorted((root / "src").rglob("*")):
        if not path.is_file() or not path.name.endswith((".h", ".cpp")):
            continue
        rel = path.relative_to(root).as_posix()
        for lines, first, name in long_functions(path, limit):
            if (rel, name) in known:
                used.add((rel, name))
                continue
            offences.append(f"{rel}:{first}: function {name} is {lines} lines (at most {limit})")
    return offences, used


# --- driver ---------------------------------------------------------------------------------

def check(root, known_includes, known_long):
    """Every offence in the tree at `root`, as printable lines."""
    try:
        layers = read_layers(root / "README.md")
    except ValueError as e:
        return None, [str(e)]
    errs = table_errors(layers) + doc_table_errors(root, layers)
    inc, inc_used = include_errors(root, layers, known_includes)
    fun, fun_used = length_errors(root, known_long, MAX_FUNCTION_LINES)
    stale = [f"{f}: known include of {h} no longer found: remove it from KNOWN_INCLUDES"
             for f, h in sorted(known_includes.keys() - inc_used)]
    stale += [f"{f}: known long function {n} no longer found: remove it from "
              f"KNOWN_LONG_FUNCTIONS" for f, n in sorted(known_long.keys() - fun_used)]
    return layers, errs + inc + fun + stale


SELF_TEST_README = """# t
Layers depend downward only:

| layer | directory | may include | what |
| --- | --- | --- | --- |
| low | `src/low/` | — | x |
| high | `src/high/` | low | y |
"""


def self_test():
    """The checks find an upward include and a long function in a synthetic tree."""
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        (root / "src/low").mkdir(parents=True)
        (root / "src/high").mkdir(parents=True)
        (root / "README.md").write_text(SELF_TEST_README)
        (root / "src/high/a.h").write_text('#include "low/b.h"\n#include "high/c.h"\n')
        (root / "src/high/c.h").write_text("int c();\n")
        body = "".join(f'  x += {k}; // }} "}}"\n' for k in range(MAX_FUNCTION_LINES - 2))
        (root / "src/low/b.h").write_text(
            '#include "high/a.h"\n'
            f"int Short::ok(int x) const {{\n{body}}}\n"
            f"int too_long(int x) {{\n{body}  return x;\n}}\n"
            "auto f = [](int x) {\n" + body * 2 + "};\n")
        _, errs = check(root, {}, {})
        want = ['src/low/b.h:1: #include "high/a.h": layer low may not include layer high',
                f"function too_long is {MAX_FUNCTION_LINES + 1} lines"]
        for w in want:
            if not any(w in e for e in errs):
                print("self-test failed: expected an error containing", repr(w), "got", errs)
                return False
        if len(errs) != len(want):
            print("self-test failed: unexpected errors", errs)
            return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=pathlib.Path,
                    default=pathlib.Path(__file__).resolve().parents[2])
    args = ap.parse_args()
    if not self_test():
        return 1
    layers, errs = check(args.root, KNOWN_INCLUDES, KNOWN_LONG_FUNCTIONS)
    if layers is None:
        print(*errs, sep="\n")
        return 2
    for e in errs:
        print(e)
    print(f"layout: {len(layers)} layers, {len(KNOWN_INCLUDES)} known upward includes, "
          f"{len(KNOWN_LONG_FUNCTIONS)} known long functions; {len(errs)} offences")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
