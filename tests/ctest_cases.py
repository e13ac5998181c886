#!/usr/bin/env python3
"""Lists the ctest entries declared in Python test files, for tests/CMakeLists.txt.

    python3 tests/ctest_cases.py FILE.py...

A test method, or a whole test class, is an entry when decorated with
`@vltest.ctest("NAME", timeout=S[, asan=True][, qemu=True])` (pylib/vltestlib/vltest.py).
The files are read with `ast`, not imported, so the decorator's arguments must be literals.
Prints one line per entry, in file order and then source order:

    NAME|FILE|CASE|TIMEOUT|ASAN|QEMU

CASE is `Class.method` for a method, `Class` for a class (unittest's argument); TIMEOUT is
ctest's TIMEOUT in s before any sanitizer scaling; ASAN and QEMU are 1 or 0. Exits 1 with
a message on stderr on a name used twice, a non-literal argument, a decorated function
outside a class or not named test_*, or a name that is not [a-z0-9_]+.
"""
import ast
import re
import sys

FIELDS = ("timeout", "asan", "qemu")


def decorator_args(dec):
    """(name, {timeout, asan, qemu}) of a `...ctest(...)` call decorator, else None."""
    if not isinstance(dec, ast.Call):
        return None
    f = dec.func
    if not ((isinstance(f, ast.Attribute) and f.attr == "ctest") or
            (isinstance(f, ast.Name) and f.id == "ctest")):
        return None
    vals = [ast.literal_eval(a) for a in dec.args]
    kw = {k.arg: ast.literal_eval(k.value) for k in dec.keywords}
    names = ("name",) + FIELDS
    for n, v in zip(names, vals):
        kw[n] = v
    unknown = set(kw) - set(names)
    if unknown or "name" not in kw or "timeout" not in kw:
        raise ValueError("ctest(): needs name and timeout; unknown %s" % sorted(unknown))
    return kw.pop("name"), {"timeout": int(kw["timeout"]), "asan": bool(kw.get("asan")),
                            "qemu": bool(kw.get("qemu"))}


def cases(path):
    """Yields (name, case, fields) for every decorated class or method of `path`."""
    tree = ast.parse(open(path).read(), path)
    in_class = set()
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for dec in cls.decorator_list:
            got = decorator_args(dec)
            if got:
                yield got[0], cls.name, got[1]
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            in_class.add(fn)
            for dec in fn.decorator_list:
                got = decorator_args(dec)
                if got:
                    if not fn.name.startswith("test"):
                        raise ValueError("%s.%s: not a test method" % (cls.name, fn.name))
                    yield got[0], "%s.%s" % (cls.name, fn.name), got[1]
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn not in in_class and any(
                decorator_args(d) for d in fn.decorator_list):
            raise ValueError("%s: ctest() outside a test class" % fn.name)


def main(paths):
    seen = {}
    out = []
    for path in paths:
        try:
            found = list(cases(path))
        except (ValueError, SyntaxError) as e:
            sys.exit("ctest_cases: %s: %s" % (path, e))
        for name, case, f in found:
            if not re.fullmatch(r"[a-z0-9_]+", name):
                sys.exit("ctest_cases: %s: bad ctest name %r" % (path, name))
            if name in seen:
                sys.exit("ctest_cases: %s: %s already declared in %s" % (path, name, seen[name]))
            seen[name] = path
            out.append("|".join([name, path, case, str(f["timeout"]), str(int(f["asan"])),
                                 str(int(f["qemu"]))]))
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
