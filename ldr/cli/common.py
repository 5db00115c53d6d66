"""Options shared by several commands (Ray, writers); the build flags are generated from the
settings' declarations (build_options.py)."""
from __future__ import annotations

import click


RAY_OPTIONS = [
    click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
                 help="Encode on a Ray cluster: ADDRESS as ray.init takes it (auto, ray://head:10001, host:6379); "
                      "without one, a local cluster on this machine. The index directory must be on storage "
                      "every node mounts at the same path. Needs ldr[ray]."),
    click.option("--ray-workers", type=int, default=None,
                 help="Encoder actors (default: one per GPU, else the cluster's CPUs / --ray-cpus-per-worker)."),
    click.option("--ray-cpus-per-worker", type=float, default=None,
                 help="CPUs per encoder actor (default: 1 with GPUs, else up to 4)."),
    click.option("--ray-shard-docs", type=int, default=None,
                 help="Documents per shard, each one segment (default: ~4 shards per worker, at most 1000)."),
]


def ray_options(f):
    for opt in reversed(RAY_OPTIONS):
        f = opt(f)
    return f


def make_ray_options(ray_address, ray_workers, ray_cpus_per_worker, ray_shard_docs):
    from ..index.ray_build import RayOptions
    given = [n for n, v in (("--ray-workers", ray_workers), ("--ray-cpus-per-worker", ray_cpus_per_worker),
                            ("--ray-shard-docs", ray_shard_docs)) if v is not None]
    if ray_address is None:
        if given:
            from ..errors import ConfigError
            raise ConfigError(f"{', '.join(given)} only apply with --ray")
        return None
    return RayOptions(address=None if ray_address == "local" else ray_address, workers=ray_workers,
                      cpus_per_worker=ray_cpus_per_worker, shard_docs=ray_shard_docs)


def _echo_ray(info: dict) -> None:
    if info:
        retried = f", shards retried: {info['retried']}" if info["retried"] else ""
        click.echo(f"encoded on Ray: {info['workers']} workers x {info['cpus_per_worker']:g} CPUs"
                   + (f" + {info['gpus_per_worker']:g} GPU" if info["gpus_per_worker"] else "")
                   + f" on {info['nodes']} node{'s' if info['nodes'] != 1 else ''}, {info['shards']} shards{retried}")


WRITE_OPTIONS = [
    click.option("-i", "--index", "index_path", required=True, type=click.Path(), help="Index directory."),
    click.option("--wait", is_flag=True, help="Wait for another writer of the index to finish instead of failing."),
    click.option("--trust-remote-code", is_flag=True, help="Allow the index's models to run code they ship."),
    click.option("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)."),
]


def write_options(f):
    for opt in reversed(WRITE_OPTIONS):
        f = opt(f)
    return f


