"""ONNX exports in children forked from one warm Python (a zygote), one zygote per process.

An export's child used to be a fresh Python that imported torch, transformers and the ONNX tools
before it traced anything: 4-7 s of a small model's 6-9 s export, paid again by every export of
a process (a first `ldr index` exports its dense and its sparse model; the test suite makes ten
exports). The first export of a process now starts a zygote that imports them once; each export
is a child forked from it, which exits when done and takes the tracer's and the optimizer's
memory with it, as the fresh child did. The zygote imports nothing of the caller's (no
`__main__`, unlike multiprocessing's forkserver) and leaves when its parent closes the pipe
(exit, kill -9) or after IDLE_S without an export. Exports of one process run one at a time.
"""
from __future__ import annotations

import importlib
import json
import os
import select
import subprocess
import sys
import threading

IDLE_S = 600.0       # a server that exported a reranker holds it (~550 MB, mostly shared libraries) this long
# variables torch, transformers, tokenizers and ONNX read when they are imported: a zygote
# started under other values is replaced (the others are the export's own, applied in its child)
# (not what they set themselves once imported: TORCHINDUCTOR_CACHE_DIR, KMP_*)
IMPORT_TIME = ("PYTHON", "PATH", "LD_", "HF_", "TRANSFORMERS_", "TORCH_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_")
# read when used, so the export's child applies them: `ray.init` sets PYTHONBREAKPOINT in its
# driver, which replaced a warm zygote (~6 s of CPU) in any process that exports after joining Ray
CALL_TIME = ("PYTHONBREAKPOINT",)
# fork after torch's imports is what PyTorch's own DataLoader workers do on Linux; macOS (its
# frameworks are not fork-safe) and Windows (no fork) keep a fresh child per export
FORK = sys.platform.startswith("linux")
CHILD = ("-P", "-m", "ldr.encode.export_child")     # after sys.executable; the zygote adds --zygote
_lock = threading.Lock()
_zygote: "_Zygote | None" = None


def _import_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME) and k not in CALL_TIME}


class _Zygote:
    def __init__(self, env: dict):
        self.env, self.owner = _import_env(env), os.getpid()
        self.proc = subprocess.Popen([sys.executable, *CHILD, "--zygote"], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                     errors="replace")

    def live(self) -> bool:
        """Running, and this process's own (a forked copy of its parent holds the parent's)."""
        return self.owner == os.getpid() and self.proc.poll() is None

    def ask(self, request: dict) -> dict | None:
        """The child's {"rc", "stderr"}; None when the zygote is gone (idle timeout, killed)."""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError, ValueError):
            return None
        return json.loads(line) if line else None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)       # it leaves at the closed pipe once its export is done
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(argv: list[str], env: dict, torch: bool = True, warm: str | None = None) -> tuple[int, str]:
    """(exit status, stderr) of `export_child.main(argv)` in a child forked from this process's
    zygote, under `env` and this process's working directory. `warm`: the ldr module of the kind's
    export wrapper, which the zygote imports once (with its EXPORT_IMPORTS) before it forks. Work
    that needs no torch (`torch` False: an int8 graph quantised from its fp32 export) starts no
    zygote: a fresh child, unless one is warm already; so does every export where FORK is False."""
    global _zygote
    request = {"argv": argv, "env": env, "cwd": os.getcwd(), "warm": warm}
    with _lock:
        if not FORK or not torch and not (_zygote and _zygote.live()):
            proc = subprocess.run([sys.executable, *CHILD, *argv], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, errors="replace")
            return proc.returncode, proc.stderr
        for _ in range(2):       # a zygote that left (idle, killed) is replaced once
            if _zygote is not None and _zygote.owner != os.getpid():
                _zygote = None          # a forked copy of this process: its parent's zygote is not its own
            if _zygote is not None and (not _zygote.live() or _zygote.env != _import_env(env)):
                _zygote.close()
                _zygote = None
            if _zygote is None:
                _zygote = _Zygote(env)
            answer = _zygote.ask(request)
            if answer is not None:
                return answer["rc"], answer["stderr"]
            _zygote.close()
            _zygote = None
    return 1, "the export's zygote process exited before answering"


def _preload() -> None:
    """What every export imports; best effort: a missing package is the child's to report."""
    try:
        import onnx  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from onnxruntime.transformers import optimizer  # noqa: F401
        # transformers imports a model's code lazily, and BERT's pulls in the shared modeling code
        # (generation, masking, torch._dynamo): 3.3 s of a tiny model's 5 s export in each child
        import transformers.models.bert.modeling_bert  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError or a broken install: the child says which
        pass


def _fork_one(request: dict, main) -> dict:
    """Fork a child that runs `main(argv)` with its stderr on a pipe; its status and stderr."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:        # the child: the export's own environment, directory and stderr
        rc = 1
        try:
            os.close(r)
            os.dup2(w, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)     # fd 1 is the zygote's answer pipe
            sys.stderr = open(2, "w", closefd=False, errors="replace")
            sys.stdout = open(1, "w", closefd=False)
            os.environ.clear()
            os.environ.update(request["env"])
            os.chdir(request["cwd"])
            rc = main(request["argv"])
        except BaseException:  # noqa: BLE001 - the traceback is the parent's last line of stderr
            import traceback
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(rc)
    os.close(w)
    chunks = []
    with open(r, "rb") as fh:
        while chunk := fh.read(65536):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    return {"rc": os.waitstatus_to_exitcode(status), "stderr": b"".join(chunks).decode(errors="replace")[-20000:]}


def serve(main) -> int:
    """The zygote: import once, then one forked child per request line until stdin closes."""
    _preload()
    warmed: set[str] = set()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], IDLE_S)
        if not ready:
            return 0
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        module = request.get("warm") or ""
        if module.startswith("ldr.") and module not in warmed:
            warmed.add(module)      # the kind's wrapper module and what its export imports, once
            try:
                for name in (module, *importlib.import_module(module).__dict__.get("EXPORT_IMPORTS", ())):
                    importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the child reports it
                pass
        sys.stdout.write(json.dumps(_fork_one(request, main)) + "\n")
        sys.stdout.flush()
