"""``conformance report``, ``sign`` and ``verify``: write a sealed (and signed) run, sign one, check one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from conformance.report import FORMATS, ReportError, render, report_from_results, write_reports
from conformance.report.text import VERDICT_TEXT
from fakehw.cli_common import EXIT_BAD_INPUT, EXIT_FAILURE, CliError

if TYPE_CHECKING:
    from conformance.provenance.attest import Signer
    from conformance.provenance.verify import TrustPolicy

RUN_MARKERS = ("report.json", "results.json", "attestation.intoto.json")
"""Files that make a directory a run (one of them missing is a finding, not a reason to skip the run)."""
SIGNING_HELP = ("How to sign: --sign-key KEY (a PEM private key: Ed25519, ECDSA or RSA; e.g. openssl genpkey "
                "-algorithm ed25519 -out key.pem), --sigstore (keyless, with the ambient OIDC identity of a GitHub "
                "Actions job that has 'id-token: write'), or neither: the run is then UNSIGNED, and says so.")


def add_signing_options(p: argparse.ArgumentParser, defer_help: bool = False) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--sign-key", metavar="KEY", help="sign the run's attestation with this PEM private key")
    group.add_argument("--sigstore", action="store_true",
                       help="sign keyless with Sigstore (GitHub Actions OIDC identity)"
                            + ("; without one the signature is left for 'conformance sign DIR --sigstore'"
                               if defer_help else ""))


def signer_from_args(args: argparse.Namespace, defer: bool = False) -> Signer:
    """The signer the options ask for, with the key loaded now (a bad key fails before anything runs)."""
    from conformance.provenance.attest import Signer
    from conformance.provenance.dsse import SignatureError

    if getattr(args, "sign_key", None):
        try:
            return Signer.with_key(Path(args.sign_key))
        except SignatureError as exc:
            raise CliError(str(exc), EXIT_BAD_INPUT) from None
    if getattr(args, "sigstore", False):
        return Signer("sigstore", defer=defer)
    return Signer()


def cmd_report(args: argparse.Namespace) -> int:
    from conformance.provenance.attest import write_run
    from conformance.provenance.dsse import SignatureError

    signer = signer_from_args(args)
    formats = tuple(args.format) if args.format else tuple(FORMATS)
    try:
        if args.out is None and len(formats) == 1:
            report = report_from_results(Path(args.results), signing=signer.declaration())
            sys.stdout.write(render(report, formats[0]))
        elif set(formats) != set(FORMATS):
            report = report_from_results(Path(args.results), signing=signer.declaration())
            for fmt, path in write_reports(report, Path(args.out or "."), formats).items():
                print(f"{fmt:5} {path}", file=sys.stderr)
            print("conformance: not sealed (a sealed run has every format; leave --format out)", file=sys.stderr)
        else:
            written = write_run(Path(args.results), Path(args.out or "."), signer)
            report = written.report
            print(f"conformance: {args.out or '.'}: sealed; {signing_words(signer.mode, written.signed)}",
                  file=sys.stderr)
    except ReportError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    except SignatureError as exc:
        raise CliError(str(exc), EXIT_FAILURE) from None
    except OSError as exc:
        raise CliError(f"cannot read {args.results}: {exc.strerror}", EXIT_BAD_INPUT) from None
    print(f"verdict: {VERDICT_TEXT[report.verdicts.overall]}", file=sys.stderr)
    return 0


def signing_words(mode: str, signed: bool) -> str:
    if mode == "unsigned":
        return "UNSIGNED (give --sign-key or --sigstore to sign)"
    return f"signed ({mode})" if signed else f"{mode} signature pending: run conformance sign DIR --sigstore"


def cmd_sign(args: argparse.Namespace) -> int:
    """Sign finished runs (DIR, or every run below it): each must verify as it stands (apart from a pending
    signature) first."""
    signer = signer_from_args(args)
    if signer.mode == "unsigned":
        raise CliError("conformance sign needs --sign-key KEY or --sigstore", EXIT_BAD_INPUT)
    root = Path(args.run)
    runs = [root] if (root / "results.json").is_file() else sorted({p.parent for p in root.rglob("results.json")})
    if not runs:
        raise CliError(f"{root}: no results.json (not a run directory, and no runs below it)", EXIT_BAD_INPUT)
    for run_dir in runs:
        _sign_one(run_dir, signer)
    return 0


def _sign_one(run_dir: Path, signer: Signer) -> None:
    from conformance.provenance.attest import write_run
    from conformance.provenance.dsse import SignatureError
    from conformance.provenance.verify import TrustPolicy, verify_run

    check = verify_run(run_dir, TrustPolicy())
    problems = [p for p in check.problems if "signature is still pending" not in p]
    if problems:
        for p in problems:
            print(f"{run_dir}: {p}", file=sys.stderr)
        raise CliError(f"{run_dir} does not verify as it stands: not signing it", EXIT_FAILURE)
    try:
        written = write_run(run_dir / "results.json", run_dir, signer)
    except (ReportError, SignatureError) as exc:
        raise CliError(f"{run_dir}: {exc}", EXIT_FAILURE) from None
    print(f"{run_dir}: {signing_words(signer.mode, written.signed)}; verdict "
          f"{VERDICT_TEXT[written.report.verdicts.overall]}")


def _run_dirs(items: list[str]) -> list[Path]:
    dirs: list[Path] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            dirs += sorted({p.parent for name in RUN_MARKERS for p in path.rglob(name)})
        elif path.name == "report.json":
            dirs.append(path.parent)
        else:
            raise CliError(f"{item}: not a run directory (a run is verified as a whole: its report.json with "
                           "results.json, junit.xml, summary.md, report.html and the attestation)", EXIT_BAD_INPUT)
    return dirs


def _policy(args: argparse.Namespace) -> TrustPolicy:
    from conformance.provenance.dsse import SignatureError, load_public_key
    from conformance.provenance.verify import TrustPolicy

    try:
        key = load_public_key(Path(args.key)) if args.key else None
    except SignatureError as exc:
        raise CliError(str(exc), EXIT_BAD_INPUT) from None
    if args.trust_root and not Path(args.trust_root).is_file():
        raise CliError(f"cannot read trust root {args.trust_root}", EXIT_BAD_INPUT)
    return TrustPolicy(key=key, identity=args.identity, issuer=args.issuer,
                       trust_root=Path(args.trust_root) if args.trust_root else None,
                       require_signature=args.require_signature)


def _trust_words(signer: str, trusted: bool) -> str:
    if signer == "UNSIGNED":
        return ("UNSIGNED: the files agree with each other, but anyone could have written them "
                "(give --key or --identity to require a signature)")
    return f"signed by {signer}" + (" (as required)" if trusted else
                                    " (not checked against a key or identity you trust: give --key or --identity)")


def cmd_verify(args: argparse.Namespace) -> int:
    from conformance.provenance.verify import verify_run

    policy = _policy(args)
    dirs = _run_dirs(args.report)
    if not dirs:
        raise CliError(f"no report.json under {', '.join(args.report)}", EXIT_BAD_INPUT)
    ok = True
    for run_dir in dirs:
        result = verify_run(run_dir, policy)
        for problem in result.problems:
            print(f"{run_dir}: {problem}", file=sys.stderr)
        if result.problems:
            print(f"conformance: {run_dir} does NOT verify", file=sys.stderr)
            ok = False
            continue
        assert result.report is not None
        print(f"{run_dir}: verified; verdict {VERDICT_TEXT[result.report.verdicts.overall]}; "
              f"{_trust_words(result.signer, result.trusted)}")
    return 0 if ok else EXIT_FAILURE


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="build a sealed (and signed) certification report from a results file",
                       description="Writes report.json, junit.xml, summary.md and report.html next to results.json, "
                                   "the seal over all of them (attestation.intoto.json, an in-toto statement with "
                                   "SLSA provenance) and, when signing, attestation.sigstore.json. With one "
                                   "--format and no --out the report goes to stdout. " + SIGNING_HELP)
    p.add_argument("results", help="results file written by a run (--conformance-results)")
    p.add_argument("--format", action="append", choices=list(FORMATS), help="repeatable; default: all four")
    p.add_argument("--out", metavar="DIR", help="write files here (default: one format to stdout, else .)")
    add_signing_options(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sign", help="sign a finished run directory (after checking it as it stands)",
                       description="Rebuilds the report files from DIR/results.json declaring the signature, reseals "
                                   "the run and signs the seal. Refuses a run that does not verify. " + SIGNING_HELP)
    p.add_argument("run", metavar="DIR", help="a run directory (results.json, report.json, ...) or a directory of "
                                              "runs (conformance run --out with several targets or profiles)")
    add_signing_options(p)
    p.set_defaults(func=cmd_sign)

    p = sub.add_parser("verify", help="check runs: seal over every file, verdicts, catalogue, signature",
                       description="For every run directory (every report.json below the paths): the report's seal, "
                                   "verdicts and counts; every requirement of the recorded catalogue version; the "
                                   "seal over report.json, results.json, junit.xml, summary.md and report.html; and "
                                   "the signature. Give --key, or --identity (and --issuer) for keyless runs, to "
                                   "require a signature by what you trust; without them an unsigned run verifies "
                                   "as UNSIGNED. Exit 0 only when every run verifies.")
    p.add_argument("report", nargs="+", help="run directories (searched for report.json) or report.json files")
    p.add_argument("--key", metavar="PUB", help="PEM public key the run must be signed with")
    p.add_argument("--identity", metavar="URI",
                   help="keyless: the signer's certificate identity, e.g. https://github.com/fakehw/fakehw/"
                        ".github/workflows/certify.yml@refs/tags/v1")
    p.add_argument("--issuer", metavar="URL", help="keyless: the OIDC issuer, e.g. "
                                                   "https://token.actions.githubusercontent.com")
    p.add_argument("--trust-root", metavar="FILE", help="keyless: a Sigstore trusted_root.json (default: the "
                                                        "public-good root shipped with the sigstore package)")
    p.add_argument("--require-signature", action="store_true", help="refuse unsigned runs even without --key")
    p.set_defaults(func=cmd_verify)
