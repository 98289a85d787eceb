"""``compressed/pack.py``: the contrib ops' bytes and values, exactly."""

from __future__ import annotations

import numpy as np
import pytest
from quantized_weights import quantized

from ortstate.convert.compressed import pack


def test_pack4_puts_the_first_value_in_the_low_nibble_and_pads_each_row():
    values = np.array([[1, 2, 3], [15, 0, 7]], np.uint8)
    assert pack.pack4(values).tolist() == [[0x21, 0x03], [0x0F, 0x07]]
    assert pack.pack4(values).dtype == np.uint8


def test_per_block_repeats_a_group_in_each_of_its_blocks():
    grouped = quantized(np.zeros((2, 64), np.uint8), [[1, 2], [3, 4]], [[8, 8], [8, 8]], bits=4, block=16, group=32)
    assert pack.per_block(grouped.scale, grouped).tolist() == [[1, 1, 2, 2], [3, 3, 4, 4]]
    channel = quantized(np.zeros((2, 48), np.uint8), [[5], [6]], [[8], [8]], bits=4, block=16)
    assert pack.per_block(channel.scale, channel).tolist() == [[5, 5, 5], [6, 6, 6]]


def test_blocked_codes_pads_the_last_block_with_zeros():
    w = quantized(np.zeros((1, 20), np.uint8), [[1]], [[8]], bits=4, block=16)
    codes = np.arange(1, 21, dtype=np.uint8).reshape(1, 20)
    blocked = pack.blocked_codes(codes, w)
    assert blocked.shape == (1, 2, 16)
    assert blocked[0, 1].tolist() == [17, 18, 19, 20] + [0] * 12


def test_zero_points_are_left_out_when_all_are_the_default():
    assert pack.zero_point_bytes(np.full((2, 3), 8, np.uint8), 4) is None
    assert pack.zero_point_bytes(np.full((2, 3), 128, np.uint8), 8) is None
    assert pack.zero_point_bytes(np.array([[1, 2, 3]], np.uint8), 4).tolist() == [[0x21, 0x03]]
    assert pack.zero_point_bytes(np.array([[1, 200]], np.uint8), 8).tolist() == [[1, 200]]


def _codes(rows: int, k: int, high: int) -> np.ndarray:
    return (np.arange(rows * k).reshape(rows, k) * 7 % high).astype(np.uint8)


def test_stacked_codes_stack_weights_by_rows_in_their_blocks():
    a, b = _codes(2, 32, 16), _codes(1, 32, 16)[:, ::-1]
    wa = quantized(a, np.ones((2, 2)), np.full((2, 2), 8), bits=4, block=16, group=16, name="a")
    wb = quantized(b, np.ones((1, 2)), np.full((1, 2), 8), bits=4, block=16, group=16, name="b")
    assert pack.stacked_shape([wa, wb], 4) == (3, 2, 8)
    got = pack.stacked_codes([wa, wb], 4)
    low, high = np.concatenate([a, b])[:, 0::2], np.concatenate([a, b])[:, 1::2]
    assert got.reshape(3, 16).tolist() == (low | high << 4).tolist()
    eight = pack.stacked_codes([quantized(a * 9, np.ones((2, 1)), np.full((2, 1), 128), bits=8, block=32)], 8)
    assert eight.shape == (2, 1, 32) and eight.reshape(2, 32).tolist() == (a * 9).tolist()


def test_one_weight_whose_rows_start_on_a_byte_is_the_bins_bytes_uncopied():
    codes = _codes(2, 32, 16)
    stored = pack.pack4(codes)
    w = quantized(codes, np.ones((2, 1)), np.full((2, 1), 8), bits=4, block=32, packed=stored)
    got = pack.stacked_codes([w], 4)
    assert np.shares_memory(got, stored) and got.reshape(2, 16).tolist() == stored.tolist()


def test_codes_are_packed_a_chunk_of_rows_at_a_time(monkeypatch):
    codes = _codes(5, 16, 16)
    w = quantized(codes, np.ones((5, 1)), np.full((5, 1), 8), bits=4, block=16)
    whole = pack.stacked_codes([w, w], 4)
    monkeypatch.setattr(pack, "CHUNK", 2)
    assert pack.stacked_codes([w, w], 4).tolist() == whole.tolist()
    assert pack.nibble_codes(quantized(codes * 17, [[1]] * 5, [[128]] * 5, bits=8, block=16)).shape == (10, 1, 8)


def test_an_8_bit_weight_splits_into_high_and_low_nibble_halves():
    codes = np.array([[0x12, 0xAB] * 8], np.uint8)  # one row, k 16
    w = quantized(codes, [[0.5]], [[0x9C]], bits=8, block=16)
    nibbles = pack.nibble_codes(w)
    assert nibbles.shape == (2, 1, 8)
    assert nibbles[0, 0].tolist() == [0xA1] * 8  # high nibbles 1, A two a byte
    assert nibbles[1, 0].tolist() == [0xB2] * 8  # low nibbles 2, B
    assert pack.nibble_scales(w).tolist() == [[8.0], [0.5]]
    assert pack.nibble_zero_points(w).tolist() == [[0x9], [0xC]]
    # The two halves dequantized and added are the weight: (q - zp) s.
    halves = [np.stack([half & 15, half >> 4], -1).reshape(-1).astype(float) for half in nibbles[:, 0]]
    scales, zps = pack.nibble_scales(w)[:, 0], pack.nibble_zero_points(w)[:, 0]
    summed = sum((half - zp) * s for half, zp, s in zip(halves, zps, scales))
    assert summed.tolist() == ((codes[0].astype(float) - 0x9C) * 0.5).tolist()


@pytest.mark.parametrize(("k", "bits", "row"), [(4, 4, [0x21, 0x43]), (3, 8, [1, 2, 3])])
def test_gather_tables_take_two_codes_a_byte_unless_rows_are_odd(k, bits, row):
    w = quantized(np.array([[1, 2, 3, 4][:k]], np.uint8), [[1]], [[8]], bits=4, block=16)
    assert pack.gather_bits(w) == bits
    assert pack.gather_codes(w).tolist() == [row]
