"""The sweep's Optuna study read from memory and written through to its SQLite file.

Optuna's RDB storage caches finished trials only: every read of the study (each `ask`
reads it several times: waiting trials, the relative search space, TPE's history) loads
every unfinished trial again from SQLite, with its parameters, intermediate values and
attributes. Under ASHA by promotion the trials paused at a rung stay RUNNING until they
go on or are stopped, hundreds of them in a long sweep, so each new trial would cost the
driver more than the last; in memory an ask stays at milliseconds (benchmarks/load.py
measures both, benchmarks/README.md has the figures).

The driver's searcher is the study's only writer while the sweep runs (optuna-dashboard,
reports and warm starts only read the file), so the memory copy never goes stale. Every
write reaches the SQLite file before the call returns, as before: the file stays the
durable copy that `sweep resume`, Tune's experiment checkpoints and the dashboard read.

Only Optuna's public `BaseStorage` interface is used, of both storages.
"""

from __future__ import annotations

import threading
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, InMemoryStorage, RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

__all__ = ["MirroredStorage"]


class MirroredStorage(BaseStorage):
    """Optuna storage: reads from an in-memory copy of the studies at `url` (loaded once),
    writes to both the copy and `url`. Ids are the copy's; the file's are mapped."""

    def __init__(self, url: str):
        self.disk = RDBStorage(url)
        self.memory = InMemoryStorage()
        self._lock = threading.RLock()
        self._disk_study: dict[int, int] = {}  # memory study id -> file study id
        self._disk_trial: dict[int, int] = {}  # memory trial id -> file trial id
        for study in self.disk.get_all_studies():
            self._load_study(study)

    def _load_study(self, study) -> None:
        """Copy `study` (a study of the file, as `get_all_studies` gives it) and its trials."""
        disk_id = self.disk.get_study_id_from_name(study.study_name)
        study_id = self.memory.create_new_study(study.directions, study.study_name)
        self._disk_study[study_id] = disk_id
        for key, value in study.user_attrs.items():
            self.memory.set_study_user_attr(study_id, key, value)
        for key, value in study.system_attrs.items():
            self.memory.set_study_system_attr(study_id, key, value)
        # In number order: the copy numbers its trials as it receives them.
        for trial in sorted(self.disk.get_all_trials(disk_id, deepcopy=False), key=lambda t: t.number):
            trial_id = self.memory.create_new_trial(study_id, template_trial=trial)
            self._disk_trial[trial_id] = self.disk.get_trial_id_from_study_id_trial_number(disk_id, trial.number)

    def _write(self, method: str, memory_id: int, disk_ids: dict[int, int], *args) -> None:
        """`method` (a BaseStorage write taking an id first) on the copy, then on the file
        with the file's id for `memory_id`."""
        with self._lock:
            getattr(self.memory, method)(memory_id, *args)
            getattr(self.disk, method)(disk_ids[memory_id], *args)

    # ------------------------------------------------------------------ studies

    def create_new_study(self, directions: Sequence[StudyDirection], study_name: str | None = None) -> int:
        with self._lock:
            disk_id = self.disk.create_new_study(directions, study_name)
            # The same name in both (the file chose it when none was given).
            study_id = self.memory.create_new_study(directions, self.disk.get_study_name_from_id(disk_id))
            self._disk_study[study_id] = disk_id
            return study_id

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self.memory.delete_study(study_id)
            self.disk.delete_study(self._disk_study.pop(study_id))

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._write("set_study_user_attr", study_id, self._disk_study, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._write("set_study_system_attr", study_id, self._disk_study, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self.memory.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self.memory.get_study_name_from_id(study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self.memory.get_study_directions(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self.memory.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self.memory.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list:
        return self.memory.get_all_studies()

    # ------------------------------------------------------------------ trials

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        with self._lock:
            trial_id = self.memory.create_new_trial(study_id, template_trial)
            # The file gets the very trial the copy made (its start time, its state).
            created = self.memory.get_trial(trial_id)
            self._disk_trial[trial_id] = self.disk.create_new_trial(self._disk_study[study_id], template_trial=created)
            return trial_id

    def set_trial_param(
        self, trial_id: int, param_name: str, param_value_internal: float, distribution: BaseDistribution
    ) -> None:
        self._write("set_trial_param", trial_id, self._disk_trial, param_name, param_value_internal, distribution)

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Sequence[float] | None = None) -> bool:
        with self._lock:
            if not self.memory.set_trial_state_values(trial_id, state, values):
                return False  # a waiting trial taken already: nothing changed
            return self.disk.set_trial_state_values(self._disk_trial[trial_id], state, values)

    def set_trial_intermediate_value(self, trial_id: int, step: int, intermediate_value: float) -> None:
        self._write("set_trial_intermediate_value", trial_id, self._disk_trial, step, intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._write("set_trial_user_attr", trial_id, self._disk_trial, key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._write("set_trial_system_attr", trial_id, self._disk_trial, key, value)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self.memory.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self.memory.get_trial(trial_id)

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self.memory.get_all_trials(study_id, deepcopy=deepcopy, states=states)

    def remove_session(self) -> None:
        self.disk.remove_session()
