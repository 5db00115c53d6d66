"""How ldr joins Ray, the one way for a build (index/ray_build.py) and for `ldr serve --ray`
(serve/ray_shards.py): its defaults for the cluster it may start, the variables its workers need,
the folder they start in, and a clear error where no cluster answers."""
from __future__ import annotations

import logging
import os
from pathlib import Path

from . import crash_signals
from .errors import ConfigError

# read by the driver alone: fault injection (the driver hands it to the workers itself) and the
# server's API key (a secret: Ray keeps a job's runtime_env where the cluster's users can read it)
DRIVER_ONLY = ("LDR_RAY_FAULTS", "LDR_API_KEY")


def join(address: str | None, logging_level: int = logging.ERROR) -> bool:
    """Connect this process to the Ray cluster at `address` (as ray.init takes it), or start a
    local one where it is None; nothing where this process is connected already. True where this
    call connected: a build then disconnects when it ends (`ray.shutdown()`); a server stays."""
    import ray

    if ray.is_initialized():
        return False
    # ldr's settings reach every worker (threads, the export cache, plugins, languages)
    env = {k: v for k, v in os.environ.items() if k.startswith("LDR_") and k not in DRIVER_ONLY}
    # Ray Data's actors always get max_restarts with their arguments in the object store, which
    # Ray's core logs as an error at every build; set RAY_BACKEND_LOG_LEVEL to see its logs
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    # no usage reports from ldr's jobs (a machine may be offline): Ray Data otherwise starts a
    # collector actor on every cluster, one more worker process (~1.6 s of CPU)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray puts the driver's working directory first on every worker's sys.path: run from a folder
    # holding another `ldr` (an old clone), workers and replicas would import that one. Started
    # from the folder this package lives in, they import the driver's own.
    here = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[1])
    try:
        with crash_signals.jvm_kept():     # Ray's crash reporter must not replace the JVM's handlers
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     logging_level=logging_level, configure_logging=True,
                     runtime_env={"env_vars": env} if env else None)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ConfigError(f"cannot connect to the Ray cluster at {address or 'a new local cluster'}: {e}") from None
    finally:
        os.chdir(here)
    return True
