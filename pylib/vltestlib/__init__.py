"""virtlink's Python test library, shared by the tests (tests/interop, tests/hostile,
tests/bench) and the bench harness (bench/*.py). Python 3 standard library only.

    vltest      child processes, the switch + testpmd test bed, counter assertions, main()
    vlguest     QEMU/TCG Linux guests on the switch's ports (builds on vltest); ping,
                transfer and iperf between guests and namespaces
    netns       network namespaces and veth pairs for a test, frames counted and injected
    vhost_peer  a raw vhost-user front-end: framing, messages, guest memory, split rings
    notify_socket  a stand-in for systemd's NOTIFY_SOCKET: the sd_notify(3) datagrams a
                service sends, with their arrival times

How it is found (one path mechanism, no sys.path edits in the test files): ctest sets
PYTHONPATH=<repo>/pylib:<repo>/bench for every Python test (tests/CMakeLists.txt); the
bench scripts, run as `python3 bench/NAME.py`, import bench/_pylib.py first, which puts
<repo>/pylib on sys.path. To run a test file by hand:

    PYTHONPATH=pylib:bench python3 tests/interop/test_txrx.py --virtlink build/virtlink -v
"""
