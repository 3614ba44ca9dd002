"""The registered model as ctpipe reads it: its versions, aliases, tags, lineage and champion history.

Every call goes through ``RegisteredModel.call``, the configured bounded retries on transient failures
(``ctpipe.components.lib.tracking.RetryPolicy``). Beside the reads, only the model's creation
(``ensure_registered_model``) is here; ``Registry`` (registry.py) adds the writes that move the champion, and
readers (``ctpipe models list``, ``ctpipe gc``, the register step's searches) use that same object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.registry.history import HistoryTag
from ctpipe.components.lib.registry.model_files import EXPORT_DIGEST_TAG
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, HISTORY_TAG, KEY_TAG, STACK_TAG
from ctpipe.components.lib.tracking import (  # also sets MLFLOW_DISABLE_TELEMETRY before mlflow loads
    RetryPolicy,
    error_code,
)
from ctpipe.components.lib.tracking.lineage import version_lineage

T = TypeVar("T")


class RegisteredModel:
    """The registered model ``config.model_name`` on ``tracking_uri``: every read retried (``call``)."""

    def __init__(self, tracking_uri: str, config: RegistryConfig) -> None:
        import mlflow

        self.uri = tracking_uri
        self.config = config
        self.name = config.model_name
        self.client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)

    # --- plumbing -------------------------------------------------------------------------------

    def call(self, fn: Callable[[], T], what: str) -> T:
        """``fn()`` with the configured bounded retries on transient failures."""
        return RetryPolicy.of(self.config).call(fn, what)

    def ensure_registered_model(self) -> None:
        """Create the registered model unless it exists (a concurrent creator is fine)."""
        from mlflow.exceptions import MlflowException

        def create() -> None:
            try:
                self.client.create_registered_model(
                    self.name,
                    description="Tabular classifier trained by the ctpipe continuous-training pipeline.",
                )
            except MlflowException as err:
                if error_code(err) != "RESOURCE_ALREADY_EXISTS":
                    raise

        self.call(create, f"create registered model '{self.name}'")

    def aliases(self) -> dict[str, str]:
        """Alias -> version (as text: SQLite gives ints, HTTP strings)."""
        from mlflow.exceptions import MlflowException

        def get() -> dict[str, str]:
            try:
                model = self.client.get_registered_model(self.name)
            except MlflowException as err:
                if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
                    return {}
                raise
            return {alias: str(version) for alias, version in (model.aliases or {}).items()}

        return self.call(get, f"read the aliases of '{self.name}'")

    def alias_version(self, alias: str) -> str | None:
        return self.aliases().get(alias)

    def model_tags(self) -> dict[str, str]:
        from mlflow.exceptions import MlflowException

        def get() -> dict[str, str]:
            try:
                return dict(self.client.get_registered_model(self.name).tags or {})
            except MlflowException as err:
                if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
                    return {}
                raise

        return self.call(get, f"read the tags of '{self.name}'")

    def require_model(self, *, empty_store_ok: bool = False) -> None:
        """UserError unless the registered model exists, naming those that do (a mistyped name is not empty);
        with ``empty_store_ok``, a store that has no registered model at all (nothing registered yet) passes."""
        from mlflow.exceptions import MlflowException

        from ctpipe.components.lib.registry.lock import LOCK_SUFFIX

        def exists() -> bool:
            try:
                self.client.get_registered_model(self.name)
                return True
            except MlflowException as err:
                if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
                    return False
                raise

        if self.call(exists, f"read registered model '{self.name}'"):
            return
        names = self.call(lambda: [m.name for m in self.client.search_registered_models(max_results=1000)],
                          "list registered models")
        others = sorted(n for n in names if not n.endswith(LOCK_SUFFIX))
        if empty_store_ok and not others:
            return
        found = ", ".join(others) or "none"
        raise UserError(
            f"there is no registered model '{self.name}' at {self.uri}; registered models: {found}. Pass the "
            "pipeline's --config (registry.model_name) or --model-name."
        )

    def get_version(self, version: str):
        """The model version, or a UserError naming the versions that exist."""
        from mlflow.exceptions import MlflowException

        text = str(version).strip()
        if not text.isdigit():
            raise UserError(
                f"model version '{version}' is not a version number; run 'ctpipe models list' to see them"
            )

        def get():
            try:
                return self.client.get_model_version(self.name, text)
            except MlflowException as err:
                if error_code(err) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                    return None
                raise

        found = self.call(get, f"read version {text} of '{self.name}'")
        if found is None:
            self.require_model()
            existing = ", ".join(str(v.version) for v in self.versions()) or "none"
            raise UserError(
                f"model '{self.name}' has no version {text}; existing versions: {existing}. "
                "Run 'ctpipe models list' to see them."
            )
        return found

    def lineage(self, version: Any) -> dict[str, Any]:
        """The lineage of a version: its digest-checked ``ctpipe/lineage.json``, or an older version's tags."""
        return version_lineage(self.client, version, retry=RetryPolicy.of(self.config))

    def versions(self) -> list:
        """Every version of the model, oldest first."""
        versions = self.call(
            lambda: list(self.client.search_model_versions(f"name = '{self.name}'", max_results=10000)),
            f"list versions of '{self.name}'",
        )
        return sorted(versions, key=lambda v: int(v.version))

    def find_by_model_sha256(self, sha256: str):
        """The oldest complete version made from the model file with this SHA-256, if any: a cached rerun
        (KFP reused the selected model) is not registered a second time."""
        found = self.call(
            lambda: list(self.client.search_model_versions(
                f"name = '{self.name}' and tags.`{EXPORT_DIGEST_TAG}` = '{sha256}'", max_results=1000
            )),
            f"search versions of '{self.name}' by model digest",
        )
        matches = [v for v in found if (v.tags or {}).get(COMPLETE_TAG) == "complete"]
        return min(matches, key=lambda v: int(v.version)) if matches else None

    def find_by_key(self, run_id: str, key: str, *, retry: bool = True):
        """The version this run already registered for ``key``, if any (idempotent registration)."""

        def search():
            return list(
                self.client.search_model_versions(
                    f"name = '{self.name}' and run_id = '{run_id}'", max_results=1000
                )
            )

        found = self.call(search, f"search versions of run {run_id}") if retry else search()
        matches = [v for v in found if (v.tags or {}).get(KEY_TAG) == key]
        return min(matches, key=lambda v: int(v.version)) if matches else None

    # --- champion history ------------------------------------------------------------------------

    def champion_stack(self) -> list[str]:
        return [str(v) for v in json.loads(self.model_tags().get(STACK_TAG, "[]"))]

    def champion_history(self) -> list[dict[str, Any]]:
        """The newest entries (at most ``MAX_HISTORY``); ``champion_history_pages`` reads the older ones."""
        return HistoryTag.parse(self.model_tags().get(HISTORY_TAG)).entries

    def champion_history_pages(self, max_pages: int) -> list[list[dict[str, Any]]]:
        """Up to ``max_pages`` pages of older history entries, newest page first (each page oldest first)."""
        pages: list[list[dict[str, Any]]] = []
        older = HistoryTag.parse(self.model_tags().get(HISTORY_TAG)).older
        while older and len(pages) < max_pages:
            page = json.loads(self.read_record(older))
            pages.append(page["entries"])
            older = page.get("older")
        return pages

    def read_record(self, uri: str) -> str:
        """The text of a ``runs:/RUN_ID/PATH`` record this registry wrote (a full reason, a history page)."""
        import tempfile

        run_id, _, path = uri.removeprefix("runs:/").partition("/")
        with tempfile.TemporaryDirectory() as tmp:
            local = self.call(lambda: self.client.download_artifacts(run_id, path, tmp), f"read {uri}")
            with open(local, encoding="utf-8") as f:
                return f.read()
