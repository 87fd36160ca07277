"""A sandbox job for tests/sandbox/test_channel.py: it abuses the job's channel the way a hostile
candidate in the same process could. job["behaviour"] picks what it does."""

from __future__ import annotations

import os
import time

from kernelloop.sandbox.channel import Channel


def run_job(job: dict) -> int:
    channel = Channel.from_job(job)
    behaviour = job["behaviour"]
    if behaviour == "echo":  # the protocol as the harness follows it
        channel.phase("trials")
        while True:
            message = channel.receive()
            if "done" in message:
                channel.result({"echoed": True})
                return 0
            channel.send({"echo": message})
    if behaviour == "backward_phases":  # restart the clock: back to compile, forward again, forever
        for tick in range(10**6):
            channel.phase(("compile", "trials")[tick % 2])
            time.sleep(0.05)
    if behaviour == "fds":  # what it inherited
        pipes = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    pipes.append(int(fd))
            except OSError:  # the fd listdir held while it looked
                continue
        channel.result({"pipes": pipes, "channel": job["channel_fds"]})
        return 0
    if behaviour == "jump":  # skip ahead to a phase with a longer limit, then hang
        channel.phase("timing")
        time.sleep(3600)
    if behaviour == "flood":  # one endless line
        up = job["channel_fds"][1]
        while True:
            os.write(up, b"x" * 65536)
    if behaviour == "garbage":  # lines that are not JSON objects, then a real result
        for line in (b"not json\n", b"[1, 2]\n", b"\"a string\"\n", b"{\"result\": 5}\n"):
            os.write(job["channel_fds"][1], line)
        channel.result({"after": "garbage"})
        return 0
    if behaviour in ("deep_at_done", "deep_now"):  # a line 4,000 brackets deep (json's decoder recurses), then hang
        if behaviour == "deep_at_done":
            channel.phase("trials")
            while "done" not in channel.receive():
                pass
        os.write(job["channel_fds"][1], b"[" * 4000 + b"\n")
        time.sleep(3600)
    if behaviour == "cache":  # what an earlier job left in the compile cache, then leave something
        marker = os.path.join(os.environ["TRITON_CACHE_DIR"], "planted")
        found = os.path.exists(marker)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as handle:
            handle.write("a kernel for the next job")
        channel.result({"found": found, "home": os.environ["HOME"]})
        return 0
    return 1
