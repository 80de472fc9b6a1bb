import pytest

from costmodel import CostModel, load_hardware, load_model


@pytest.fixture(scope="session")
def llama8b():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="session")
def h100():
    return load_hardware("h100")


@pytest.fixture(scope="session")
def cm8b(llama8b, h100):
    return CostModel(llama8b, h100)


@pytest.fixture
def sglang_non_overlap(monkeypatch):
    """SGLang engines built with the overlap scheduler off unless a test says otherwise: the fast
    paths (cohort, chunked runs, folds, deferred finish) serve SGLang's non-overlap loop; with its
    default overlap loop the replica steps (policies/sglang_overlap.py, tests/test_sglang_overlap.py).
    Test modules about those fast paths use it so that they keep exercising them."""
    import experiments.engines as engines
    from policies.sglang_config import SGLangConfig

    monkeypatch.setattr(engines, "SGLangConfig", lambda **kw: SGLangConfig(**{"disable_overlap_schedule": True, **kw}))
