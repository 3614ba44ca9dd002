"""The local launcher reports the rank that failed on its own before the ranks that lost it as a peer."""

from __future__ import annotations

from ctpipe.components.steps.train.launchers.local import lost_a_peer


def test_a_gloo_peer_reset_is_a_consequence_not_a_cause():
    reset = ("RuntimeError: [gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:18357: "
             "Connection reset by peer. This is typically caused by a remote worker hanging")
    assert lost_a_peer(reset)
    assert lost_a_peer("RuntimeError: Connection closed by peer [127.0.0.1]:1234")
    assert not lost_a_peer("exited with code 17 and no output")
    assert not lost_a_peer("TrainingError: non-finite loss at step 3")
