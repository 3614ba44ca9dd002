"""Safe moves of the champion on the MLflow model registry: compare-and-set promotions, rollback, history.

Every alias move happens under the promotion lock (``lock.py``) and re-checks what it compares against.
Champion history is a stack of versions kept as a tag on the registered model; automatic and manual
promotions push, rollback pops. Each promotion is also recorded on the version itself (``tags.py``). The
reads these moves stand on (versions, aliases, tags, history) are ``RegisteredModel``'s (versions.py).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.hooks import hook_point
from ctpipe.components.lib.registry.history import (
    MAX_BY_CHARS,
    MAX_HISTORY,
    MAX_REASON_CHARS_IN_TAG,
    PAGE_DIR,
    HistoryTag,
    append_entry,
    check_reason,
    checked_tag,
    clip_text,
    reason_needs_artifact,
)
from ctpipe.components.lib.registry.lock import PromotionLock
from ctpipe.components.lib.registry.tags import (
    COMPLETE_TAG,
    HISTORY_TAG,
    LEGACY_PROMOTION_TAGS,
    MAX_STACK,
    PROMOTION_KINDS,
    PROMOTION_TAG,
    STACK_TAG,
    promotion_record,
    recorded_champion_alias,
)
from ctpipe.components.lib.registry.versions import RegisteredModel

log = logging.getLogger(__name__)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Promotion:
    """What a promotion attempt did."""

    promoted: bool
    champion: str | None
    previous: str | None
    reason: str


class Registry(RegisteredModel):
    """The registered model ``config.model_name`` on ``tracking_uri``, with retries on every call, whose champion
    moves only under the promotion lock."""

    def __init__(self, tracking_uri: str, config: RegistryConfig) -> None:
        super().__init__(tracking_uri, config)
        self.lock = PromotionLock(self.client, self.name, config, self.call)

    @property
    def lock_name(self) -> str:
        return self.lock.name

    def locked(self, wait_seconds: float = 120.0):
        """Hold the promotion lock inside the block (see ``PromotionLock``)."""
        return self.lock.held(wait_seconds)

    # --- champion moves ----------------------------------------------------------------------------

    def _keep_full_reason(self, version: str, reason: str, stamp: str) -> str | None:
        """Store a reason too long for the tags as an artifact of the version's run; its address, or None."""
        if not reason_needs_artifact(reason):
            return None
        run_id = self.get_version(version).run_id
        if not run_id:
            return None  # a version made outside ctpipe: the reason is clipped, and says so
        path = f"{PAGE_DIR}/reason-v{version}-{stamp}.txt"
        self.call(lambda: self.client.log_text(run_id, reason, path), f"store the promotion reason of version {version}")
        return f"runs:/{run_id}/{path}"

    def _move_champion(
        self, version: str, *, kind: str, by: str, reason: str, previous: str | None, pop: bool,
        completing: bool = False,
    ) -> bool:
        """Point the champion alias at ``version`` and record it (call with the lock held).

        The alias move is the commit point. Everything that could be refused (a tag past MLflow's limit) is
        built and checked before any write, the full reason and the version's tags are written before the
        alias moves, and the stack and history after it: if those fail, the move stands, this returns False,
        and the next promotion or rollback completes the record (``_record_cut_off_move``)."""
        check_reason(reason)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{time.time_ns() % 1_000_000_000:09d}"
        stack = self.champion_stack()
        if pop:
            stack = stack[:-1]
        else:
            if previous is not None and (not stack or stack[-1] != previous):
                stack.append(previous)  # a champion set outside ctpipe: remember it for rollback
            stack.append(version)
        stack_value = checked_tag(STACK_TAG, json.dumps(stack[-MAX_STACK:]))
        at = _now_iso()
        reason_uri = self._keep_full_reason(version, reason, stamp)
        entry = {"version": version, "previous": previous, "kind": kind, "by": by, "reason": reason, "at": at}
        if reason_uri:
            entry["reason_uri"] = reason_uri
        page_file = f"{PAGE_DIR}/history-{stamp}.json"
        run_id = self._run_of(version) if len(self.champion_history()) >= MAX_HISTORY else None
        update = append_entry(HistoryTag.parse(self.model_tags().get(HISTORY_TAG)), entry, page_file=page_file,
                              page_uri=f"runs:/{run_id}/{page_file}")
        history_value = checked_tag(HISTORY_TAG, update.tag.to_json())
        record = {"kind": kind, "at": at, "by": clip_text(by, MAX_BY_CHARS),
                  "reason": clip_text(reason, MAX_REASON_CHARS_IN_TAG, reason_uri), "reason_uri": reason_uri or ""}
        record_value = checked_tag(PROMOTION_TAG, json.dumps(record, ensure_ascii=False, separators=(",", ":")))
        c = self.client
        self.lock.assert_held()
        stale = [key for key in LEGACY_PROMOTION_TAGS if key in (self.get_version(version).tags or {})]
        # Record on the version first: if we die between the calls the alias never points at an unrecorded promotion.
        self.call(lambda: c.set_model_version_tag(self.name, version, PROMOTION_TAG, record_value),
                  f"tag version {version}")
        for key in stale:  # a version promoted in the older layout: its fields now live in the one record
            self.call(lambda k=key: c.delete_model_version_tag(self.name, version, k), f"untag version {version}")
        self.lock.assert_held()  # again: those retried calls can outlast the lock's TTL on a slow MLflow
        self.call(
            lambda: c.set_registered_model_alias(self.name, self.config.champion_alias, version),
            "move the champion alias",
        )
        hook_point("after_alias")  # the commit points: where the tests kill a registration
        try:
            self.call(lambda: c.set_registered_model_tag(self.name, STACK_TAG, stack_value), "record champion stack")
            if update.page is not None:
                if not run_id:
                    raise RuntimeError(f"version {version} has no run to keep the older history in")
                self.call(lambda: c.log_text(run_id, json.dumps(update.page), page_file), "page out champion history")
            self.call(lambda: c.set_registered_model_tag(self.name, HISTORY_TAG, history_value),
                      "record champion history")
        except Exception as err:  # the alias moved: the promotion stands, its record is completed later
            if completing:
                raise  # completing a cut-off record: a move recorded on top of it would hide it for good
            log.warning(
                "version %s is the champion, but recording it in the champion stack/history failed (%s); the next "
                "promotion or rollback of '%s' completes the record", version, err, self.name,
            )
            return False
        return True

    def _run_of(self, version: str) -> str | None:
        from mlflow.exceptions import MlflowException

        try:
            return self.get_version(version).run_id
        except (UserError, MlflowException):
            return None

    def _record_cut_off_move(self, version: str, previous: str | None) -> None:
        """Record a move to ``version`` whose attempt was cut off after the alias moved (call with the lock held).

        ``_move_champion`` tags the version before it moves the alias and writes the stack and history after:
        the alias on a version tagged promoted, with a history not ending at it, is such a move. Its retry
        finds the version already champion; without this the stack and history would never show it."""
        history = self.champion_history()
        if history and str(history[-1].get("version")) == version:
            return
        record = promotion_record(self.get_version(version).tags or {})
        kind = record["kind"] if record else None
        if record is None or kind not in PROMOTION_KINDS:
            return  # the alias was set outside ctpipe: nothing of ours to complete
        if history and record["at"] < str(history[-1].get("at", "")):
            return  # promoted before the last recorded move: the alias was set back to it outside ctpipe
        previous = previous if previous is not None else (str(history[-1]["version"]) if history else None)
        stack = self.champion_stack()
        if kind == "rollback":
            if stack[-2:-1] != [version]:
                return  # the stack already popped (or was changed outside ctpipe): only a pop is ours to redo
        elif stack[-1:] == [version]:
            self._write_stack(stack[:-1])  # the cut-off attempt wrote the stack but not the history
        self._move_champion(version, kind=kind, by=record["by"] or "pipeline",
                            reason=record["reason"], previous=previous, pop=kind == "rollback",
                            completing=True)

    def complete_champion_record(self) -> None:
        """Complete the stack and history of a champion move cut off after its alias moved (``ctpipe gc`` does)."""
        with self.locked():
            current = self.alias_version(self.config.champion_alias)
            if current is not None:
                self._record_cut_off_move(current, None)

    def promote_if_unchanged(
        self, version: str, expected: str | None, *, reason: str, by: str = "pipeline"
    ) -> Promotion:
        """Compare-and-set: make ``version`` champion only if the champion is still ``expected``."""
        version = str(version)
        with self.locked():
            hook_point("in_promotion_lock")
            current = self.alias_version(self.config.champion_alias)
            if current is not None and current != version:
                self._record_cut_off_move(current, None)
            if current == version:
                self._record_cut_off_move(version, str(expected) if expected is not None else None)
                return Promotion(True, version, expected, f"version {version} is already the champion")
            if current != (str(expected) if expected is not None else None):
                return Promotion(
                    False,
                    current,
                    expected,
                    f"not promoted: the champion changed from {'version ' + str(expected) if expected else 'none'} "
                    f"(the one this candidate was evaluated against) to version {current} while this run was "
                    f"evaluating; the candidate stays '{self.config.challenger_alias}'. Re-run the pipeline to "
                    f"evaluate against the new champion, or promote by hand with 'ctpipe models promote {version}'.",
                )
            self._move_champion(version, kind="auto", by=by, reason=reason, previous=current, pop=False)
            return Promotion(
                True,
                version,
                current,
                f"promoted to champion (replacing {'version ' + current if current else 'none'})",
            )

    def checked_for_champion(self, mv) -> dict:
        """The lineage of ``mv``, after the checks every move that makes a version champion applies (a promotion
        by hand and a rollback alike): registered completely by ctpipe, and its ``ctpipe/lineage.json`` whole
        and matching its digest (LineageError, a registry error naming the version and the file)."""
        if (mv.tags or {}).get(COMPLETE_TAG) != "complete":
            raise UserError(
                f"version {mv.version} of '{self.name}' was not registered completely by ctpipe (tag "
                f"{COMPLETE_TAG}=complete missing), so it cannot become champion; register it again."
            )
        return self.lineage(mv)

    def promote_manual(self, version: str, *, reason: str, by: str) -> Promotion:
        """Make ``version`` champion by hand, recorded as manual with who and why."""
        mv = self.get_version(version)
        alias = self.config.champion_alias
        lineage = self.checked_for_champion(mv)
        recorded = recorded_champion_alias(lineage)
        in_use = self.aliases() if recorded is not None and recorded != alias else {}
        if recorded in in_use and alias not in in_use:
            # Its pipeline reads another alias, in use here: moving this unused one would change nothing it serves
            # or compares with (an alias renamed since, and already in use, is not refused).
            raise UserError(
                f"version {mv.version} of '{self.name}' was registered by a pipeline whose champion alias is "
                f"'{recorded}' (registry.champion_alias), but this would move '{alias}'. Pass that pipeline's "
                f"--config, or --set registry.champion_alias={recorded}."
            )
        check_reason(reason)
        with self.locked():
            current = self.alias_version(self.config.champion_alias)
            if current is not None:
                self._record_cut_off_move(current, None)
            if current == str(mv.version):
                return Promotion(False, current, current, f"version {current} is already the champion")
            self._move_champion(
                str(mv.version), kind="manual", by=by, reason=reason, previous=current, pop=False
            )
            tags = mv.tags or {}
            unblessed = ""
            if tags.get("ctpipe.blessed") != "true":  # allowed (a human's call), but said, with evaluation's reason
                reasons = lineage.get("blessing_reasons")
                if isinstance(reasons, list):
                    why = (reasons or ["no reason recorded"])[0]
                else:  # an older version's tag, clipped to the tag limit
                    why = "see 'ctpipe models show'"
                unblessed = f" (note: evaluation did not bless version {mv.version}: {why})"
            said = clip_text(reason, MAX_REASON_CHARS_IN_TAG, "ctpipe models show " + str(mv.version))
            return Promotion(True, str(mv.version), current, f"promoted by hand by {by}: {said}{unblessed}")

    def rollback(self, *, reason: str, by: str) -> Promotion:
        """Move the champion back to the previous champion on the stack."""
        with self.locked():
            current = self.alias_version(self.config.champion_alias)
            if current is None:
                self.require_model()
                raise UserError(f"model '{self.name}' has no champion, so there is nothing to roll back")
            check_reason(reason)
            self._record_cut_off_move(current, None)
            stack = self.champion_stack()
            if not stack or stack[-1] != current:
                stack = [*stack, current]
            if len(stack) < 2:
                raise UserError(
                    f"version {current} is the first recorded champion of '{self.name}'; there is no previous "
                    "champion to roll back to (use 'ctpipe models promote VERSION' to choose one)"
                )
            target = stack[-2]
            # The checks a promotion applies: a target whose lineage was altered is refused, as promote refuses it.
            self.checked_for_champion(self.get_version(target))
            self._write_stack(stack)
            self._move_champion(target, kind="rollback", by=by, reason=reason, previous=current, pop=True)
            return Promotion(True, target, current, f"rolled back from version {current} to version {target}")

    def _write_stack(self, stack: list[str]) -> None:
        self.call(
            lambda: self.client.set_registered_model_tag(
                self.name, STACK_TAG, json.dumps(stack[-MAX_STACK:])
            ),
            "record champion stack",
        )
