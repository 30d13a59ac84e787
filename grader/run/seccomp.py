"""The system calls the sandbox refuses, as the classic-BPF program `bwrap --seccomp FD` loads.

Why: every process in a sandbox runs as one uid, and bubblewrap's own init (pid 1 of the
sandbox's pid namespace) is dumpable and outside every job's cgroup. A rank that could ptrace
it could make it fork a process that outlives the job and its caps (a red team did, and slowed
the reference's timed launches from there). So the submission may not trace, read or write
another process's memory, or take another process's descriptors; and it may not reach a
keyring at all. A refused call fails with EPERM, as a kernel without the feature would answer.

The program (struct sock_filter, 8 bytes each, native byte order): load the architecture;
anything but this machine's own ABI is refused whole (32-bit calls on a 64-bit kernel use other
numbers, and x32 calls set a bit of their own: refused too); then load the call's number and
refuse the listed ones; allow the rest.
"""
from __future__ import annotations

import errno
import os
import struct

# <linux/filter.h> and <linux/seccomp.h>
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_IF_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_IF_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_REFUSE = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO
_NUMBER, _ARCH = 0, 4  # offsets in struct seccomp_data
_X32_BIT = 0x40000000

# architecture: (AUDIT_ARCH_*, {call: number}, whether the x32 bit exists)
_REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "add_key", "request_key", "keyctl")
_ARCHITECTURES = {
    "x86_64": (0xC000003E, {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438, "add_key": 248, "request_key": 249, "keyctl": 250}, True),
    "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438, "add_key": 217, "request_key": 218, "keyctl": 219}, False),
}


def _instruction(code: int, k: int, if_true: int = 0, if_false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, if_true, if_false, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for `machine` (default: this one), or None where its numbers are not known."""
    known = _ARCHITECTURES.get(machine or os.uname().machine)
    if known is None:
        return None
    arch, numbers, x32 = known
    calls = [numbers[name] for name in _REFUSED]
    checks = len(calls) + (1 if x32 else 0)
    # the jumps count the instructions to skip: the last two are "allow" then "refuse"
    body = [_instruction(_LOAD_WORD, _ARCH), _instruction(_JUMP_IF_EQUAL, arch, 0, checks + 2), _instruction(_LOAD_WORD, _NUMBER)]
    if x32:
        body.append(_instruction(_JUMP_IF_AT_LEAST, _X32_BIT, checks, 0))
    for index, number in enumerate(calls):
        body.append(_instruction(_JUMP_IF_EQUAL, number, len(calls) - index, 0))
    return b"".join([*body, _instruction(_RETURN, _ALLOW), _instruction(_RETURN, _REFUSE)])


def describe() -> str:
    """What the filter refuses, for the results' environment."""
    return "tracing other processes and keyrings refused (seccomp)" if program() else f"no seccomp filter ({os.uname().machine}: its call numbers are not known here)"


# The uid tier has no bubblewrap to load the filter: this program does, then becomes the job's
# command. It runs as the job's uid (after setpriv), reads the filter from the descriptor named
# first, sets no_new_privs (what an unprivileged process needs to install a filter, and what
# keeps a setuid program from undoing it), installs it for every thread to come and execs the
# rest of its arguments. Nothing of the grader's is imported: `python -I -S` and ctypes alone.
LOADER = """
import ctypes, os, sys
fd, argv = int(sys.argv[1]), sys.argv[2:]
rules = os.read(fd, 1 << 16)
os.close(fd)
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
prog = Prog(len(rules) // 8, rules)
if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:
    sys.exit("the sandbox could not install its seccomp filter: " + os.strerror(ctypes.get_errno()))
os.execv(argv[0], argv)
"""  # prctl(PR_SET_NO_NEW_PRIVS = 38, 1); prctl(PR_SET_SECCOMP = 22, SECCOMP_MODE_FILTER = 2, &prog)


def loader_command(python: str, fd: int, argv: list[str]) -> list[str]:
    """`argv` started by LOADER with the filter in descriptor `fd` (the uid tier's)."""
    return [python, "-I", "-S", "-c", LOADER, str(fd), *argv]


_KEYCTL = {"x86_64": 250, "aarch64": 219}  # keyctl(2)'s number: the uid tier clears the uid's keyrings with it
# keyctl(KEYCTL_GET_KEYRING_ID = 0, KEY_SPEC_USER_KEYRING = -4 / KEY_SPEC_USER_SESSION_KEYRING = -5, create = 0), then KEYCTL_CLEAR = 7
CLEAR_KEYRINGS = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
call = int(sys.argv[1])
for spec in (-4, -5):
    ring = libc.syscall(call, 0, spec, 0)
    if ring > 0:
        libc.syscall(call, 7, ring)
"""


def clear_keyrings_command(python: str) -> list[str] | None:
    """The command that, run as a uid, empties its user and user-session keyrings (which outlive
    every process of it); None where keyctl's number is not known here."""
    number = _KEYCTL.get(os.uname().machine)
    return None if number is None else [python, "-I", "-S", "-c", CLEAR_KEYRINGS, str(number)]
