"""Library notices that say nothing about a run, silenced so that the run's own lines show."""

from __future__ import annotations

import logging
import warnings


def quiet_libraries() -> None:
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*modules? in eval mode.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*LitLogger.*")
    warnings.filterwarnings("ignore", message=".*`validation_step` but have no `val_dataloader`.*")  # evaluate's
    # Resuming mid-"epoch" is by design: the prompt stream is keyed by the checkpointed step counter.
    warnings.filterwarnings("ignore", message=".*ended before the epoch ended.*")
