#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/<target>/ (one small file per case, named after it).

The layouts are those each fuzz_<target>.cc reads from the front of its input. Seeds need no valid CRC:
the targets' mode bits re-seal what they read. Inputs that libFuzzer found and merged
(scripts/run_fuzz.sh with RINGGUARD_FUZZ_MERGE=1) sit beside these, named by their SHA-1, and the inputs
that found a bug are kept as found_<what> (this script neither writes nor removes them).
Usage: python3 tests/fuzz/make_corpus.py
"""
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
TRAILER_MAGIC = 0x31544752  # "RGT1"
CONTROL_MAGIC = 0x31434752  # "RGC1"
FP_MAGIC = 0x31504652  # "RFP1"
FUZZ_LANE = zlib.crc32(b"fuzz")  # the issue lane fuzz_fingerprint.cc enters (an id is its name's CRC-32)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def trailer_seeds():
    ident = dict(seq=7, step=3, slice=1, column=2, payload=4096, attempt=0)

    def trailer(magic=TRAILER_MAGIC, crc=0xDEADBEEF, flags=0, **over):
        f = dict(ident, **over)
        return struct.pack("<IIQIIIIHHI", magic, crc, f["seq"], f["step"], f["slice"], f["column"],
                           f["payload"], f["attempt"], flags, 0)

    def case(t, mode, crc=0xDEADBEEF, bit=0):
        e = struct.pack("<QIIIIH", ident["seq"], ident["step"], ident["slice"], ident["column"],
                        ident["payload"], ident["attempt"])
        return t + e + struct.pack("<IBH", crc, mode, bit)

    write("trailer", "ok", case(trailer(), 1))
    write("trailer", "poisoned", case(trailer(flags=1), 1))
    write("trailer", "corrupt_payload", case(trailer(), 1, crc=0x12345678))
    write("trailer", "stale_seq", case(trailer(seq=6), 1))
    write("trailer", "stale_attempt", case(trailer(attempt=1), 1))
    write("trailer", "size_mismatch", case(trailer(payload=4095), 1))
    write("trailer", "unknown_flags", case(trailer(flags=0x8000), 1))
    write("trailer", "version_skew_rgt2", case(trailer(magic=0x32544752), 1))
    write("trailer", "bad_magic", case(trailer(magic=0x31544753), 1))
    write("trailer", "not_sealed", case(trailer(), 0))
    write("trailer", "zeros", bytes(73))
    write("trailer", "bitflip_sealed", case(trailer(), 2, bit=77))
    write("trailer", "bitflip_poisoned", case(trailer(), 6, bit=300))
    write("trailer", "empty", b"")


def control_seeds():
    def frame(tag=1, sender=2, receiver=0, seq=3, body=b"\x11" * 32, magic=CONTROL_MAGIC, length=None,
              reserved=0):
        n = len(body) if length is None else length
        return struct.pack("<IHHiiQII", magic, tag, reserved, sender, receiver, seq, n, 0) + body

    def case(fr, mode=1, tag=1, frm=2, receiver=0, expected=3, bit=0):
        return struct.pack("<HiiQBI", tag, frm, receiver, expected, mode, bit) + fr

    write("control_frame", "fingerprint_ok", case(frame()))
    write("control_frame", "verdict_ok", case(frame(tag=2, body=struct.pack("<II", 0, 0)), tag=2))
    write("control_frame", "error_empty_body", case(frame(tag=3, body=b""), tag=3))
    write("control_frame", "handshake_ok", case(frame(tag=4, sender=1, receiver=1, seq=0, body=b"\x02" * 24),
                                                tag=4, frm=1, receiver=1, expected=0))
    write("control_frame", "not_sealed", case(frame(), mode=0))
    write("control_frame", "truncated", case(frame()[:10]))
    write("control_frame", "length_mismatch", case(frame(length=31)))
    write("control_frame", "bad_magic", case(frame(magic=0x32434752)))
    write("control_frame", "misaddressed_tag", case(frame(tag=2)))
    write("control_frame", "misaddressed_sender", case(frame(sender=1)))
    write("control_frame", "misaddressed_receiver", case(frame(receiver=5)))
    write("control_frame", "stale", case(frame(seq=2)))
    write("control_frame", "out_of_order", case(frame(seq=9)))
    write("control_frame", "invalid_tag", case(frame(tag=77), tag=77))
    write("control_frame", "seal_and_flip", case(b"body bytes of a verdict", mode=2, bit=123))
    write("control_frame", "seal_empty", case(b"", mode=3, bit=5))


def fingerprint_seeds():
    def fp(collective=0, op=0, dtype=0, flags=0, count=100, seq=3, root=-1, scalar=0, magic=FP_MAGIC,
           lane=0, lane_seq=0):
        return struct.pack("<IBBBBQQiIII", magic, collective, op, dtype, flags, count, seq, root, scalar, lane,
                           lane_seq)

    def case(a, b, mode=0, index=0, kind=0, op=0, dtype=0, count=8, seq=1, root=-1, factor=0.25,
             ra=0, rb=1, lane=0, lane_seq=0):
        return a + b + struct.pack("<iiBBBBBQQidII", ra, rb, mode, index, kind, op, dtype, count, seq, root,
                                   factor, lane, lane_seq)

    write("fingerprint", "equal", case(fp(), fp()))
    write("fingerprint", "count_differs", case(fp(), fp(count=101)))
    write("fingerprint", "seq_differs", case(fp(), fp(seq=4)))
    write("fingerprint", "op_differs", case(fp(op=1), fp(op=3)))
    write("fingerprint", "broadcast_root", case(fp(collective=3, root=2), fp(collective=3, root=1), kind=3,
                                                root=2))
    write("fingerprint", "sendrecv_tag", case(fp(collective=5, root=7), fp(collective=5, root=7), kind=5))
    write("fingerprint", "invalid_input_flag", case(fp(flags=1), fp()))
    write("fingerprint", "bad_magic", case(fp(magic=0), fp()))
    write("fingerprint", "garbage_enums", case(fp(collective=200, op=99, dtype=250), fp(), kind=200, op=99,
                                               dtype=250))
    write("fingerprint", "copy_one_byte_changed", case(fp(), fp(), mode=3, index=9))
    write("fingerprint", "premul_quarter", case(fp(op=8, scalar=0x3E800000), fp(), mode=0x80, kind=1))
    write("fingerprint", "premul_negative", case(fp(), fp(), mode=0x81, kind=0, factor=-3.5))
    write("fingerprint", "ranks_negative", case(fp(), fp(count=0), ra=-1, rb=2147483647))
    # Issue lanes (protocol version 4): ids are CRC-32s of names; "fuzz" is the lane the target enters
    # under mode bit 6, so it is described by name.
    write("fingerprint", "lane_differs", case(fp(lane=FUZZ_LANE), fp(lane=0xCBF43926), lane=0xCBF43926,
                                              lane_seq=2))
    write("fingerprint", "lane_seq_differs", case(fp(lane=FUZZ_LANE, lane_seq=1),
                                                  fp(lane=FUZZ_LANE, lane_seq=2), mode=0x40, lane=FUZZ_LANE,
                                                  lane_seq=1))
    write("fingerprint", "lane_against_none", case(fp(), fp(lane=FUZZ_LANE), mode=0x40, lane=FUZZ_LANE))
    write("fingerprint", "lane_byte_changed", case(fp(lane=FUZZ_LANE), fp(), mode=3, index=33))
    write("fingerprint", "sendrecv_lane", case(fp(collective=5, root=7, lane=FUZZ_LANE),
                                               fp(collective=5, root=7), kind=5, mode=0x40, lane=FUZZ_LANE))
    write("fingerprint", "lane_seq_without_lane", case(fp(lane_seq=6), fp(), lane=0, lane_seq=6))
    write("fingerprint", "lane_max", case(fp(lane=0xFFFFFFFF, lane_seq=0xFFFFFFFF), fp(), lane=0xFFFFFFFF,
                                          lane_seq=0xFFFFFFFF))


def options_seeds():
    write("options", "defaults", "")
    write("options", "typical",
          "RINGGUARD_SLICE_BYTES=1048576\nRINGGUARD_SLOTS=4\nRINGGUARD_TIMEOUT_MS=1000\n"
          "RINGGUARD_MAX_RETRIES=3\nRINGGUARD_LOG_LEVEL=info")
    write("options", "every_setting",
          "RINGGUARD_SLICE_BYTES=65536\nRINGGUARD_SLOTS=2\nRINGGUARD_NAN_CHECK=skip\n"
          "RINGGUARD_MAX_RETRIES=0\nRINGGUARD_TIMEOUT_MS=31536000000\nRINGGUARD_LOG_LEVEL=warning\n"
          "RINGGUARD_FAULT_MODE=burst\nRINGGUARD_FAULT_PROB=0.01\nRINGGUARD_FAULT_SCHEDULE=0:1:0:1,2:0:3:0\n"
          "RINGGUARD_FAULT_SEED=18446744073709551615\nRINGGUARD_FAULT_BITS=64\n"
          "RINGGUARD_FAULT_BURST_BITS=2\nRINGGUARD_FAULT_DELAY_MS=600000\nRINGGUARD_FAULT_REPEAT=2\n"
          "RINGGUARD_DEVICE_TRANSPORT=staged\nRINGGUARD_CPU_TRANSPORT=gloo\nRINGGUARD_NCCL_LANES=8\n"
          "RINGGUARD_KERNEL_SMS=100000\nRINGGUARD_POOL_RELEASE_BYTES=281474976710656\n"
          "RINGGUARD_TELEMETRY_INTERVAL_MS=20\nRINGGUARD_POLICY=off\nRINGGUARD_POLICY_RULES=\n"
          "RINGGUARD_POLICY_SET=/a=1\nRINGGUARD_POLICY_FORCE=attention=eager")
    write("options", "log_level_err", "RINGGUARD_LOG_LEVEL=err")
    write("options", "log_level_bad", "RINGGUARD_LOG_LEVEL=WARN")
    write("options", "slice_too_large", "RINGGUARD_SLICE_BYTES=1073741825")
    write("options", "unsigned_wraps", "RINGGUARD_POOL_RELEASE_BYTES=99999999999999999999")
    write("options", "unsigned_space_minus", "RINGGUARD_POOL_RELEASE_BYTES= -5")
    write("options", "unsigned_leading_zeros", "RINGGUARD_TIMEOUT_MS=000123")
    write("options", "slots_one", "RINGGUARD_SLOTS=1")
    write("options", "timeout_zero", "RINGGUARD_TIMEOUT_MS=0")
    write("options", "prob_nan", "RINGGUARD_FAULT_PROB=nan")
    write("options", "prob_exponent", "RINGGUARD_FAULT_PROB=1e-3")
    write("options", "prob_above_one", "RINGGUARD_FAULT_PROB=1.0000001")
    write("options", "schedule_bad", "RINGGUARD_FAULT_SCHEDULE=0:1:0")
    write("options", "schedule_control", "RINGGUARD_FAULT_MODE=control\nRINGGUARD_FAULT_SCHEDULE=0:1:2:1\n\n\n")
    write("options", "device_bogus", "RINGGUARD_DEVICE_TRANSPORT=bogus")
    write("options", "kernel_sms_negative", "RINGGUARD_KERNEL_SMS=-1")
    write("options", "repeat_int_max", "RINGGUARD_FAULT_REPEAT=2147483647")
    write("options", "later_line_wins", "RINGGUARD_SLOTS=1\nRINGGUARD_SLOTS=8")
    write("options", "first_line_mode", "x=retransmit\nRINGGUARD_NAN_CHECK=error")
    write("options", "fault_mode_nul", b"RINGGUARD_FAULT_MODE=bitflip\x00garbage")  # issue 47, item 8
    write("options", "prob_underflow", "RINGGUARD_FAULT_PROB=1e-400")


def env_seeds():
    write("env", "empty", "")
    write("env", "known", "RINGGUARD_SLICE_BYTES=1\nRINGGUARD_LOG_LEVEL=debug\nPATH=/usr/bin")
    write("env", "misspelt", "RINGGUARD_FAULT_PROBABILITY=0.5\nRINGGUARD_SLICES_BYTES=4096")
    write("env", "tool_names", "RINGGUARD_TEST_PEERS_FINALIZE=1\nRINGGUARD_BENCH_ITERS=3\n"
                               "RINGGUARD_BUILD_DIR=build\nRINGGUARD_AUTOLOAD=0")
    write("env", "bare_names", "RINGGUARD_\nRINGGUARD_X\nRINGGUARD_SLOTS")
    write("env", "no_value", "RINGGUARD_TIMEOUT\n=\n==RINGGUARD_SLOTS")
    write("env", "question_mark", "RINGGUARD_did you mean THIS?=1")


def schedule_seeds():
    def case(text, world=4, mode=0, seed=1, nbytes=4096):
        return struct.pack("<iBQH", world, mode, seed, nbytes) + text.encode()

    write("fault_schedule", "one_entry", case("0:1:0:1"))
    write("fault_schedule", "two_entries", case("0:1:0:1,2:0:3:0"))
    write("fault_schedule", "empty", case(""))
    write("fault_schedule", "step_out_of_range", case("1:6:0:0"))
    write("fault_schedule", "rank_out_of_range", case("1:0:0:4"))
    write("fault_schedule", "control", case("0:1:2:1,5:3:0:3", mode=7))
    write("fault_schedule", "control_self", case("0:1:1:1", mode=7))
    write("fault_schedule", "delay", case("3:2:1:0", mode=6))
    write("fault_schedule", "multibit_64", case("0:0:0:0", mode=1, seed=63))
    write("fault_schedule", "burst", case("0:0:0:0", mode=2 | (1 << 6), seed=30 << 8, nbytes=3))
    write("fault_schedule", "garbage_one_byte", case("0:0:0:0", mode=3, nbytes=1))
    write("fault_schedule", "trailer", case("0:0:0:0", mode=4))
    write("fault_schedule", "retransmit_empty_payload", case("0:0:0:0", mode=5, nbytes=0))
    write("fault_schedule", "trailing_comma", case("0:1:0:1,"))
    write("fault_schedule", "not_numbers", case("a:b:c:d"))
    write("fault_schedule", "negative", case("-1:0:0:0"))
    write("fault_schedule", "u64_max", case("18446744073709551615:0:0:0"))
    write("fault_schedule", "int_overflow", case("0:2147483648:0:0"))
    write("fault_schedule", "single_rank", case("0:0:0:0", world=1))
    write("fault_schedule", "world_zero", case("0:0:0:0", world=0))



def policy_rules_seeds():
    """Rules text, then optionally 0x01 and RINGGUARD_POLICY_SET edits (fuzz_policy_rules.cc). The hostile
    cases of issue 47: each crashed, hung, or escaped as a RuntimeError or a 100 KB message before."""
    with open(os.path.join(HERE, "..", "..", "share", "ringguard", "rules", "default.json"), "rb") as f:
        default = f.read()
    one = b'{"version": 1, "families": {"a": {"variants": [{"name": "x"}]}}}'
    write("policy_rules", "default", default)
    write("policy_rules", "default_with_edit", default + b"\x01/families/attention/min_dwell_steps=3")
    write("policy_rules", "one_family", one)
    write("policy_rules", "deep_5000", b"[" * 5000 + b"]" * 5000)
    write("policy_rules", "deep_33", b"[" * 33 + b"]" * 33)
    write("policy_rules", "deep_in_description",
          b'{"version": 1, "families": {"a": {"description": ' + b"[" * 5000 + b"]" * 5000 + b"}}}")
    write("policy_rules", "wide_value", b'{"version": 1, "families": {"a": {"description": ['
          + b",".join([b"1"] * 20000) + b"]}}}")
    write("policy_rules", "number_overflow",
          b'{"version": 1, "families": {"a": {"variants": [{"name": "x"}, {"name": "y", "when": '
          b'[{"signal": "s", "above": {"enter": 1e400}}]}]}}}')
    write("policy_rules", "edit_number_overflow", one + b"\x01/families/a/min_dwell_ms=1e400")
    write("policy_rules", "edit_deep", one + b"\x01/families/a/description=" + b"[" * 5000 + b"]" * 5000)
    write("policy_rules", "nul_then_garbage", one + b"\x00garbage")
    write("policy_rules", "not_utf8", b'{"version": 1, "families": {"a": {"description": "caf\xe9", '
          b'"variants": [{"name": "x"}]}}}')
    write("policy_rules", "duplicate_key",
          b'{"version": 1, "families": {"a": {"variants": [{"name": "x"}]}, "a": {"variants": []}}}')


def window_part_seeds():
    # capacity, ranks - 2, expected bytes, then {offset, bytes, firstChunk}: within, at the edges, past them.
    def case(capacity, ranks, expected, offset, nbytes, first):
        return struct.pack("<IBQQQQ", capacity, ranks - 2, expected, offset, nbytes, first)

    cap = 256 << 10
    write("window_part", "fits", case(cap, 2, 4096, 0, 4096, 0))
    write("window_part", "second_part", case(cap, 3, 4096, 4096, 4096, 1))
    write("window_part", "ends_at_the_edge", case(cap, 2, 64, cap - 64, 64, 16))
    write("window_part", "past_the_end", case(cap, 2, 128, cap - 64, 128, 0))
    write("window_part", "offset_overflow", case(cap, 2, 64, (1 << 64) - 32, 64, 0))
    write("window_part", "chunk_overflow", case(cap, 2, 64, 0, 64, (1 << 64) - 1))
    write("window_part", "wrong_size", case(cap, 4, 4096, 0, 4095, 0))
    write("window_part", "empty", case(cap, 2, 0, 0, 0, 0))


def cpu_mask_seeds():
    # tests/fuzz/fuzz_cpu_mask.cc: the text of a rank's CPU set.
    write("cpu_mask", "two_cpus", "3")
    write("cpu_mask", "bound_to_cpu_5", "02")
    write("cpu_mask", "trailing_zeros", "f00")
    write("cpu_mask", "empty", "")
    write("cpu_mask", "upper_case", "3F")
    write("cpu_mask", "not_hex", "3z")
    write("cpu_mask", "too_long", "f" * 1025)


if __name__ == "__main__":
    trailer_seeds()
    control_seeds()
    fingerprint_seeds()
    options_seeds()
    env_seeds()
    schedule_seeds()
    policy_rules_seeds()
    window_part_seeds()
    cpu_mask_seeds()
