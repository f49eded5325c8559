"""The testbed subcommands of the docker backend: ``host``, ``images`` and ``chaos``.

Kept out of :mod:`testbed.cli` so that module only learns one hook (:func:`register`); everything here imports
the docker SDK lazily, so ``testbed`` starts as fast as before for local-backend users.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from fakehw.cli_common import EXIT_BAD_INPUT, AddCommand, CliError

PLATFORM_HELP = "linux/amd64, linux/riscv64 or linux/arm64; repeat or comma-separate (default: amd64 and riscv64)"


def _platforms(values: list[str] | None) -> tuple[str, ...]:
    """``["linux/amd64,linux/riscv64"]`` -> ``("amd64", "riscv64")``; unknown ones are a bad-input error."""
    from testbed.images import SUPPORTED_ARCHES, parse_platforms

    try:
        return parse_platforms(values) if values else ("amd64", "riscv64")
    except ValueError as exc:
        raise CliError(f"{exc} (supported: {', '.join('linux/' + a for a in SUPPORTED_ARCHES)})",
                       EXIT_BAD_INPUT) from None


def cmd_host(args: argparse.Namespace) -> int:
    from testbed.host import HostSetup

    start = time.monotonic()
    setup = HostSetup(platforms=_platforms(args.platform), act=args.action == "setup")
    if args.online:
        setup.base_images = False
    report = setup.run()
    print(f"host {args.action} ({time.monotonic() - start:.1f} s):")
    print(report.render())
    if report.ready:
        print("ready: node images can be built and node containers run")
        return 0
    return 1


def cmd_images(args: argparse.Namespace) -> int:
    """Each architecture on its own: one that cannot be made (its mirror is broken) does not stop the others;
    the exit status is 1 if any failed, each failure in a few lines (debootstrap's whole log stays in a file)."""
    from testbed.images import BaseSources, ImageBuilder, ImageError, ImageInputError

    platforms = _platforms(args.platform)
    try:
        sources = BaseSources.load(suites=args.suite or (), mirrors=args.mirror or ())
    except ImageInputError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    builder = ImageBuilder(progress=args.progress, sources=sources)
    builder.online = builder.online or args.online
    if args.action == "base" and builder.online:
        raise CliError("online builds take debian:trixie-slim from the registry: no base image to make",
                       EXIT_BAD_INPUT)
    start = time.monotonic()
    failed = []
    for arch in platforms:
        try:
            if args.action == "base":
                ref = builder.base_image(arch, rebuild=args.rebuild)
                print(f"base image for linux/{arch}: {ref.tag} ({ref.how})")
            else:
                ref = builder.node_image(arch, rebuild=args.rebuild)
                print(f"node image for linux/{arch}: {ref.tag} ({ref.how})")
        except ImageInputError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
        except ImageError as exc:
            print(f"testbed: linux/{arch}: {exc}", file=sys.stderr)
            failed.append(arch)
    print(f"done in {time.monotonic() - start:.1f} s" + (f"; failed: {', '.join(failed)}" if failed else ""),
          file=sys.stderr)
    return 1 if failed else 0


def cmd_chaos(args: argparse.Namespace) -> int:
    from testbed.api import Testbed
    from testbed.backends.docker import DockerBackend

    tb = Testbed.attach(args.name, args.state_dir_path)
    if not isinstance(tb.backend, DockerBackend):
        raise CliError(f"chaos verbs need containers; cluster {tb.name} runs on the {tb.record.backend} backend "
                       "(use 'testbed up --backend docker')", EXIT_BAD_INPUT)
    verbs: dict[str, Callable[[Any, str], str]] = {
        "kill": tb.backend.kill_node,
        "restart": tb.backend.restart_node,
        "pause": tb.backend.pause_node,
        "unpause": tb.backend.unpause_node,
        "partition": tb.backend.partition_node,
        "unpartition": tb.backend.unpartition_node,
    }
    print(verbs[args.verb](tb.record, args.node))
    return 0


def remove_docker_leftovers(state_dir: Any) -> None:
    """For ``testbed down --all``: remove containers and networks of crashed docker-backend runs, if any.

    Quietly does nothing when the docker SDK is not installed or no engine runs (nothing can be left over then).
    """
    try:
        from testbed.backends.docker import remove_orphans

        removed = remove_orphans(state_dir)
    except Exception:  # no SDK or no engine: nothing of ours can be running
        return
    for item in removed:
        print(f"removed leftover {item}")


def register(add: AddCommand, state_dir: Callable[[argparse.Namespace], Any]) -> None:
    """Add ``host``, ``images`` and ``chaos`` to the ``testbed`` parser (``add`` is cli.build_parser's helper)."""

    def with_state_dir(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        def run(args: argparse.Namespace) -> int:
            args.state_dir_path = state_dir(args)
            return func(args)
        return run

    p = add("host", "check (or set up, as root) Docker, buildx and QEMU for the docker backend", cmd_host)
    p.add_argument("action", choices=("setup", "check"), help="setup: install/start what is missing; check: report")
    p.add_argument("--platform", action="append", metavar="PLATFORM", help=PLATFORM_HELP)
    p.add_argument("--online", action="store_true",
                   help="base images come from a registry (GitHub Actions): debootstrap is not needed")

    p = add("images", "make the offline base images or build the node image of each architecture (docker buildx)",
            cmd_images)
    p.add_argument("action", choices=("base", "build"), help="base: debootstrap base images; build: node image")
    p.add_argument("--platform", action="append", metavar="PLATFORM", help=PLATFORM_HELP)
    p.add_argument("--online", action="store_true", help="FROM debian:trixie-slim instead of the offline bases")
    p.add_argument("--rebuild", action="store_true", help="build even when an image with this content exists")
    p.add_argument("--suite", action="append", metavar="SUITE",
                   help="Debian suite of the base images, tried in the order given (default: images/base/"
                        "sources.toml or FAKEHW_DEBIAN_SUITES: trixie, forky, sid)")
    p.add_argument("--mirror", action="append", metavar="URL",
                   help="Debian mirror of the base images, tried in the order given (default: images/base/"
                        "sources.toml or FAKEHW_DEBIAN_MIRRORS, else this machine's apt mirror, then deb.debian.org)")
    p.add_argument("--progress", default="auto", choices=("auto", "plain", "tty", "quiet"),
                   help="buildx progress output (default: auto)")

    p = add("chaos", "container chaos on a docker-backend node: kill, restart, pause, unpause, partition",
            with_state_dir(cmd_chaos))
    p.add_argument("verb", choices=("kill", "restart", "pause", "unpause", "partition", "unpartition"),
                   help="kill: SIGKILL the node's container; restart: start it again (its agent replays its "
                        "journal); pause/unpause: freeze/thaw every process in it; partition/unpartition: cut it "
                        "off/reconnect it to the cluster network (its agent stays reachable)")
    p.add_argument("node", help="node name (its container is the target)")
