"""The shared memory of a stepper and its front ends (common/stepper/shared_block.py,
slot_ring.py): a block attached by name sees its creator's writes, and the
creator's close unlinks it; a slot gives a step's payload and tag to the
session it was written for, nothing to any other, and says when a later step
has written over it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from antiphon.common.stepper import slot_ring
from antiphon.common.stepper.shared_block import Section, SharedBlock
from antiphon.common.stepper.slot_ring import SlotRing


def test_a_block_attached_by_name_shares_its_sections_and_its_creator_unlinks_it() -> None:
    sections: list[Section] = [(np.int64, (2, 3)), (np.uint8, (5,))]
    block = SharedBlock.create(sections)
    other = SharedBlock.attach(block.name, sections)
    block.views[0][1, 2] = 7
    block.views[1][4] = 9
    assert other.views[0][1, 2] == 7 and other.views[1][4] == 9
    other.close()
    block.close(unlink=True)
    assert not Path(f"/dev/shm/{block.name}").exists()


def test_a_slot_gives_its_payload_and_tag_to_its_session_only_until_written_over() -> None:
    block = SharedBlock.create(slot_ring.sections(depth=4, rows=2, slot_bytes=8))
    try:
        slots = SlotRing(*block.views)
        slots.clear()
        # Before any step, and for a step the row had nothing in.
        assert slots.read(0, 1, token=5) == (b"", 0)
        pcm = np.array([0.5, -0.25], np.float32)
        assert slots.write(3, 1, 5, pcm, tag=11)
        data, tag = slots.read(3, 1, token=5) or (b"", -1)
        assert np.frombuffer(data, np.float32).tolist() == [0.5, -0.25] and tag == 11
        assert slots.read(3, 1, token=6) == (b"", 0)  # the row's last session's
        assert not slots.write(2, 0, 5, bytes(9))  # too big: the slot says none
        assert slots.read(2, 0, token=5) == (b"", 0)
        slots.write(3 + 4, 1, 5, b"x")  # depth steps later: the same slot
        assert slots.read(3, 1, token=5) is None
    finally:
        block.close(unlink=True)
