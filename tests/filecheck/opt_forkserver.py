"""A fork server for the lit suite's `uniorch-opt` commands: `serve SOCKET` imports uniorch-opt and
what it loads (torch, torch.export, sympy, MLIR's bindings, Triton) once, then forks a child per
command; `run SOCKET ARGS...` is the client lit calls in place of the console script. The child
takes the client's stdin, stdout, stderr, working folder and environment, runs `uniorch-opt`'s
`main(ARGS)`, and the client exits with its status.

Why: each of the suite's ~100 `uniorch-opt` commands spent 2 to 3 s importing before doing 1 s of
work; lit took 4 minutes of the CI's 2 cores. The command line, its output and its exit status are
the console script's own (`main` is what the script calls); what is shared is only the imports.
tests/test_lit.py starts a server per run when the platform passes file descriptors over Unix
sockets, and `list-passes.test` still runs the real console script. Without
`UNIORCH_LIT_FORKSERVER` set, lit.cfg.py runs the console script everywhere.

The client imports nothing heavy: it starts in tens of milliseconds.
"""
import json
import os
import socket
import struct
import sys


def _recv_exact(conn, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return data


def client(path: str, argv: list) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(conn, [struct.pack("!I", len(request))], [0, 1, 2])  # the length, with the descriptors
    conn.sendall(request)
    try:
        (status,) = struct.unpack("!i", _recv_exact(conn, 4))
    except EOFError:  # the child died without a status (a crash): as a crashed process would
        print("uniorch-opt (fork server): the command's process died without an exit status", file=sys.stderr)
        return 134
    return status


def _child(conn) -> None:
    """In the forked child: take the client's request and descriptors, run uniorch-opt, answer."""
    import signal

    # the server ignores SIGCHLD to have its children reaped; a command's own subprocesses (ptxas)
    # must be waited for, or Python reports every one of them as exiting with 0
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    status = 1
    try:
        header, fds, _, _ = socket.recv_fds(conn, 4, 3)
        (n,) = struct.unpack("!I", header)
        request = json.loads(_recv_exact(conn, n))
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.argv = ["uniorch-opt", *request["argv"]]
        from uniorch.tools.opt import main

        try:
            status = main(request["argv"])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        status = int(status or 0)
    except BaseException:  # noqa: BLE001 - reported as the console script would: a traceback, status 1
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe: nothing more to write
                pass
        try:
            conn.sendall(struct.pack("!i", status))
        finally:
            os._exit(0)


def _warm_up() -> None:
    """One command through capture, passes and codegen, so the children inherit what the first
    capture of a process imports lazily (torch._dynamo, export's tracer, the FX importer): a
    command then took 0.3 s instead of 3.5 s. Its output is dropped; nothing is launched."""
    import contextlib
    import io

    from uniorch.tools.opt import main

    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Inputs", "mlp.py")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main([f"{model}:make", "--emit", "triton", "-o", os.devnull])


def serve(path: str) -> None:
    import signal

    # what uniorch-opt loads on its way, imported once (no kernel runs here: no thread pools are
    # started before a fork)
    import torch  # noqa: F401
    import torch.export  # noqa: F401
    import uniorch.capture  # noqa: F401
    import uniorch.passes  # noqa: F401
    import uniorch.tools.opt  # noqa: F401
    from uniorch.targets import parse_target

    parse_target("interpret")  # the backend registry and Triton
    _warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        if os.fork() == 0:
            server.close()
            _child(conn)
        conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[2], sys.argv[3:]))
