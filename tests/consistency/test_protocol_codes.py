#!/usr/bin/env python3
"""The Python vhost-user front-end's protocol numbers (pylib/vltestlib/vhost_peer.py) against
the C++ ones (src/vhost/protocol.h): request codes, protocol feature bits, header flags and
the vring fd/log flags. Parses the header (no compiler); ctest entry
consistency_vhost_request_codes, label unit.

    PYTHONPATH=pylib python3 tests/consistency/test_protocol_codes.py -v
"""
import os
import re
import unittest

from vltestlib import vhost_peer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROTOCOL_H = os.path.join(ROOT, "src", "vhost", "protocol.h")
VHOST_PEER_PY = vhost_peer.__file__

# C++ constant -> the Python name that mirrors it (value in the same units).
SCALARS = {"kVersion": "VERSION", "kFlagReply": "F_REPLY", "kFlagNeedReply": "F_NEED_REPLY",
           "kVringNoFd": "NOFD", "kVringFLog": "VRING_F_LOG"}


def snake(camel):
    """kSetVringAddr -> SET_VRING_ADDR."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel[1:]).upper()


def cxx_int(expr):
    """Value of a C++ integer constant expression as protocol.h writes them (1u << 8, 0x1)."""
    expr = re.sub(r"(?<=[0-9a-fA-F])[uU][lL]*\b", "", expr.strip())
    if not re.fullmatch(r"[0-9a-fA-Fx<>| ()]+", expr):
        raise ValueError("not a plain integer expression: %r" % expr)
    return eval(expr, {"__builtins__": {}})  # noqa: S307 (digits and shifts only, checked above)


def header():
    with open(PROTOCOL_H) as f:
        return re.sub(r"//[^\n]*", "", f.read())


def cxx_requests(text):
    """{PYTHON_NAME: code} of `enum class Req`."""
    m = re.search(r"enum\s+class\s+Req\s*:\s*uint32_t\s*\{(.*?)\};", text, re.S)
    if not m:
        raise AssertionError("enum class Req not found in %s" % PROTOCOL_H)
    return {snake(k): cxx_int(v) for k, v in re.findall(r"(k\w+)\s*=\s*([^,]+),", m.group(1))}


def cxx_constants(text):
    """{kName: value} of the `inline constexpr` integer constants."""
    return {k: cxx_int(v) for k, v in re.findall(
        r"inline\s+constexpr\s+(?:u?int\d*_t|int|unsigned)\s+(k\w+)\s*=\s*([^;]+);", text)}


def python_requests():
    """The names in vhost_peer.py's request-code block ("# ---- vhost-user request codes"
    up to the next blank line)."""
    with open(VHOST_PEER_PY) as f:
        src = f.read()
    m = re.search(r"^# ---- vhost-user request codes[^\n]*\n(.*?)\n\n", src, re.M | re.S)
    if not m:
        raise AssertionError("no request-code block in %s" % VHOST_PEER_PY)
    return re.findall(r"^([A-Z][A-Z0-9_]*)\s*=", m.group(1), re.M)


class ProtocolCodes(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        text = header()
        cls.requests = cxx_requests(text)
        cls.constants = cxx_constants(text)

    def test_parsed_something(self):
        # A guard against a parser that silently finds nothing.
        self.assertGreaterEqual(len(self.requests), 30, self.requests)
        self.assertEqual(self.requests["SET_MEM_TABLE"], 5)
        self.assertIn("kProtoMq", self.constants)

    def test_request_codes(self):
        names = python_requests()
        self.assertGreaterEqual(len(names), 20, names)
        for name in names:
            with self.subTest(name=name):
                self.assertIn(name, self.requests, "%s is not a request of enum class Req" % name)
                self.assertEqual(getattr(vhost_peer, name), self.requests[name],
                                 "%s: Python %d, protocol.h %d" % (
                                     name, getattr(vhost_peer, name), self.requests[name]))

    def test_every_known_request_name_agrees(self):
        # Any other module-level constant named like a request (outside the block) too.
        for name, code in self.requests.items():
            if hasattr(vhost_peer, name):
                with self.subTest(name=name):
                    self.assertEqual(getattr(vhost_peer, name), code, name)

    def test_protocol_feature_bits(self):
        protos = {k: v for k, v in self.constants.items() if k.startswith("kProto")}
        py = {n: getattr(vhost_peer, n) for n in dir(vhost_peer) if n.startswith("PROTO_")}
        self.assertTrue(py, "no PROTO_* constants in vhost_peer")
        for name, mask in py.items():
            cxx = "kProto" + "".join(w.capitalize() for w in name[len("PROTO_"):].split("_"))
            with self.subTest(name=name):
                self.assertIn(cxx, protos, "%s has no %s in protocol.h" % (name, cxx))
                self.assertEqual(mask, 1 << protos[cxx], "%s: Python %#x, protocol.h bit %d" % (
                    name, mask, protos[cxx]))

    def test_header_and_vring_flags(self):
        for cxx, py in SCALARS.items():
            with self.subTest(name=py):
                self.assertIn(cxx, self.constants)
                self.assertEqual(getattr(vhost_peer, py), self.constants[cxx],
                                 "%s vs %s" % (py, cxx))


if __name__ == "__main__":
    unittest.main(verbosity=2)
