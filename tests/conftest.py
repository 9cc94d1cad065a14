import pytest

from rollout import kernels

kernels.pin()  # the tests run on the kernels the harness runs on (before torch's first kernel)

import torch  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """An untrained tiny model directory, shared by the tests that only need shapes and masks."""
    from harness.tiny import TinyConfig, save_tiny

    return save_tiny(
        TinyConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, head_dim=8),
        tmp_path_factory.mktemp("tiny"),
    )
