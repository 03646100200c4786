"""Names sparklog writes into Delta logs and Parquet footers are a storage format: tables
written by an earlier release must keep their meaning (idempotence, fences, log-start), so a
rename of a module or a helper must never change them."""

from __future__ import annotations

from sparklog.log import delta_sink, group_offsets, segment, transactions


def test_application_transaction_ids_are_stable() -> None:
    assert [
        transactions.end_app_id(3),
        transactions.start_app_id(3),
        transactions.cleaned_app_id(3),
        transactions.rewrite_app_id(3),
        transactions.fence_app_id(3),
        transactions.leader_app_id(3),
        transactions.leader_fence_app_id(3),
        transactions.producer_app_id("x", 3),
        group_offsets.group_fence_app_id("g"),
        group_offsets.group_offset_app_id("g", "t", 1),
        delta_sink.input_app_id("g", "t", 1),
        group_offsets.deleted_topic_app_id("t"),
        delta_sink.input_topic_app_id("g", "t"),
    ] == [
        "sparklog.end.3",
        "sparklog.start.3",
        "sparklog.cleaned.3",
        "sparklog.rewrite.3",
        "sparklog.fence.3",
        "sparklog.leader.3",
        "sparklog.leaderfence.3",
        "sparklog.producer.x.3",
        "sparklog.group/g",
        "sparklog.offset/g/t/1",
        "sparklog.input/g/t/1",
        "sparklog.deletedtopic/t",
        "sparklog.inputtopic/g/t",
    ]


def test_file_and_commit_metadata_keys_are_stable() -> None:
    assert segment.PRODUCER_KEY == "sparklog.producer"
