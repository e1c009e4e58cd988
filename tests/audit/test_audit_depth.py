"""The audit's default depth finds a wrong constant: issue 30's GELU(tanh)-mul fusion written out with
0.0447 for 0.044715 (``_constant_passes``), checked by the audit's per-rewrite entry point at the
default ``--max-examples`` with the audit's own seed of the rewrite. Shrinking is off (the finding, not
its shrunk form, is what is tested: a few seconds instead of ten or more)."""

import pytest

from pmverify._audit import check_one
from pmverify._audit.job import AuditOptions, rewrite_seed
from pmverify._audit.sources import listing, locate, record_source
from pmverify._engine.verify import fresh_settings
from pmverify._settings import AUDIT_MAX_EXAMPLES, profile_settings

SOURCE = "_constant_passes"
FLOAT32 = "gelu_mul[float32, fwd_only]"


@pytest.fixture(scope="module")
def recorded():
    return record_source(SOURCE)


def _audit_one(recorded, name, audit_seed, tmp_path, max_examples=AUDIT_MAX_EXAMPLES):
    (audited,) = [r for r in listing(SOURCE, recorded) if r.name == name]
    rewrite, pass_source = locate(SOURCE, recorded, SOURCE, name)
    settings = fresh_settings(profile_settings("ci"), shrink=False)
    seed = rewrite_seed(audit_seed, audited)
    return check_one(rewrite, pass_source, max_examples=max_examples, seed=seed, repro_dir=tmp_path, settings=settings)


def test_the_cli_and_the_job_share_the_measured_default():
    from pmverify.cli import _parser

    assert AuditOptions(sources=["inductor"]).max_examples == AUDIT_MAX_EXAMPLES
    assert _parser().parse_args(["audit"]).max_examples == AUDIT_MAX_EXAMPLES


def _assert_found_the_constant(outcome):
    assert outcome["status"] == "finding" and outcome["kind"] == "violation", outcome["reason"]
    assert outcome["violations"][0]["oracle"] == "semantics"
    # on a plain instance of the pattern: the constant's, not Inductor's matcher ignoring add's alpha
    assert outcome["variants"] == [], outcome["reason"]


def test_a_wrong_gelu_constant_is_found_at_the_default_depth_examples(recorded, tmp_path):
    _assert_found_the_constant(_audit_one(recorded, FLOAT32, 0, tmp_path))


def _bank_rms_eps():
    """The bank's RMSNormHardCodedEps rewrite (eps 1e-6 in its pattern, 1e-5 in its replacement), recorded."""
    import pmverify
    from pmverify.faults.scalars import _rms_patterns

    with pmverify.record_patterns() as rewrites:
        _rms_patterns.__wrapped__(1e-6)  # uncached: registered anew, so recorded
    (rewrite,) = rewrites
    return rewrite


@pytest.mark.slow
def test_the_constant_faults_are_found_at_the_default_depth_in_nine_of_ten_audits(recorded, tmp_path):
    """benchmarks/audit_depth.py's figure at the default depth, as a test (no shrinking: ~1 s a run)."""
    outcomes = [_audit_one(recorded, FLOAT32, audit_seed, tmp_path) for audit_seed in range(10)]
    assert sum(o["status"] == "finding" for o in outcomes) >= 9, [o["reason"] for o in outcomes]
    rms = _bank_rms_eps()
    settings = fresh_settings(profile_settings("ci"), shrink=False)
    outcomes = [
        check_one(rms, "PASS = None", max_examples=AUDIT_MAX_EXAMPLES, seed=seed, repro_dir=tmp_path, settings=settings)
        for seed in range(10)
    ]
    assert sum(o["status"] == "finding" for o in outcomes) >= 9, [o["reason"] for o in outcomes]
