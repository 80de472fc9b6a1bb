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
