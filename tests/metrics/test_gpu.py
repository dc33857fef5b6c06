"""GPU samples: a real DCGM exporter's text read, hostile text bounded, energy integrated."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tailwise.metrics.energy import at, energy_series, ratio_ci
from tailwise.metrics.gpu import MAX_GPUS, MAX_LABEL_CHARS, read_dcgm, text_lines

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "dcgm_exporter.txt"


def test_the_fixture_reads_as_two_h100s() -> None:
    gpus, counts = read_dcgm(FIXTURE.read_text())
    assert counts == {"malformed": 0, "rejected": 0, "gpus_dropped": 0}
    by_id = {g["id"]: g for g in gpus}
    assert set(by_id) == {"0", "1"}
    g0 = by_id["0"]
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["host"] == "dgx-h100-07"
    assert g0["key"] == g0["uuid"] == "GPU-4b3f6a0e-7c1d-2b9a-5e8f-0a1b2c3d4e5f"
    assert g0["util_pct"] == 87 and g0["power_w"] == 312.54
    assert g0["sm_clock_mhz"] == 1980 and g0["mem_clock_mhz"] == 2619
    assert g0["energy_mj"] == 319159391
    # FB_USED + FB_FREE, in MiB, as the exporter reports them
    assert g0["mem_used_mib"] == 72436 and g0["mem_total_mib"] == 72436 + 8123
    assert by_id["1"]["util_pct"] == 0 and by_id["1"]["power_w"] == 118.211


def _line(field: str, gpu: str, value: str, extra: str = "") -> str:
    return f'{field}{{gpu="{gpu}",UUID="GPU-{gpu}"{extra}}} {value}'


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("NaN", False),
        ("+Inf", False),
        ("-5", False),
        ("101", False),  # utilization is a percentage
        ("9223372036854775794", False),  # a DCGM blank
        ("55", True),
    ],
)
def test_values_outside_their_bounds_are_rejected_and_counted(value: str, kept: bool) -> None:
    gpus, counts = read_dcgm(_line("DCGM_FI_DEV_GPU_UTIL", "0", value) + "\n")
    assert ("util_pct" in gpus[0]) is kept
    assert counts["rejected"] == (0 if kept else 1)


def test_a_million_gpus_keep_the_first_64_and_count_the_rest() -> None:
    text = "\n".join(_line("DCGM_FI_DEV_POWER_USAGE", str(i), "100") for i in range(10**6))
    gpus, counts = read_dcgm(text)
    # the parser keeps at most MAX_SAMPLES_PARSED lines, then stops reading
    assert len(gpus) == MAX_GPUS
    assert [g["id"] for g in gpus] == [str(i) for i in range(MAX_GPUS)]
    assert counts["gpus_dropped"] > 0


def test_huge_lines_labels_and_no_newline_do_not_bloat_or_crash() -> None:
    huge_label = _line("DCGM_FI_DEV_GPU_UTIL", "0", "50", ',modelName="' + "A" * 10_000 + '"')
    one_line = 'DCGM_FI_DEV_GPU_UTIL{gpu="2"} ' + "9" * 5_000_000  # 5 MB, no newline
    bomb = _line("DCGM_FI_DEV_GPU_UTIL", "1", "50", "".join(f',l{i}="v"' for i in range(40)))
    gpus, counts = read_dcgm("\n".join([huge_label, bomb]) + "\n" + one_line)
    assert len(gpus) == 1 and len(gpus[0]["name"]) <= MAX_LABEL_CHARS
    assert counts["malformed"] == 2  # the label bomb, and the 5 MB line
    assert read_dcgm("")[0] == [] and read_dcgm("\x00\xff garbage {{{")[0] == []


def test_energy_from_the_counter_with_its_bounds() -> None:
    # 200 W, sampled every 0.5 s from t=-0.25: the counter in mJ
    times = [-0.25 + 0.5 * i for i in range(25)]
    samples = [(t, {"energy_mj": 1e9 + 200_000 * (t + 0.25), "power_w": 200.0}) for t in times]
    series, method, bounds = energy_series(samples, 1.0, 11.0)
    assert method == "counter" and series is not None and bounds is not None
    assert at(series, 11.0) - at(series, 1.0) == pytest.approx(2000.0)
    # inside: 1.25..10.75 (1900 J); bracketing: 0.75..11.25 (2100 J)
    assert bounds == pytest.approx((1900.0, 2100.0))


def test_a_counter_that_resets_falls_back_to_the_integral_of_power() -> None:
    times = [0.5 * i for i in range(10)]
    watts = [100.0 + 10 * t for t in times]  # linear: the trapezoid is exact
    samples = [
        (t, {"energy_mj": (5e6 if t < 2 else 0.0) + 1000 * t, "power_w": w})
        for t, w in zip(times, watts, strict=True)
    ]
    series, method, bounds = energy_series(samples, 0.5, 4.0)
    assert method == "power_integral" and bounds is None and series is not None
    truth = 100 * 3.5 + 5 * (4.0**2 - 0.5**2)
    assert at(series, 4.0) - at(series, 0.5) == pytest.approx(truth)


def test_samples_that_miss_an_edge_give_no_energy() -> None:
    samples = [(t, {"energy_mj": 1000.0 * t}) for t in (2.0, 3.0, 4.0)]
    assert energy_series(samples, 1.0, 4.0)[0] is None


def test_the_ratio_interval_covers_the_true_ratio() -> None:
    """Energy per token: slices whose energy is 2 J a token plus idle power noise.

    The true ratio of the process is ``2 + idle * slice / mean tokens``; over 400
    seeded runs of 40 slices the 95% interval should miss it about 5% of the time.
    """
    rng = np.random.default_rng(7)
    idle, mean_tokens, misses, runs = 50.0, 100.0, 0, 400
    truth = 2.0 + idle / mean_tokens
    for _ in range(runs):
        tokens = rng.poisson(mean_tokens, 40).astype(float)
        energy = 2.0 * tokens + idle + rng.normal(0, 10, 40)
        ci, slices, reason = ratio_ci(energy, tokens, 0.95)
        assert ci is not None and slices >= 10 and not reason
        misses += not ci[0] <= truth <= ci[1]
    assert 0.02 <= misses / runs <= 0.09


def test_text_lines_name_the_energy_and_its_interval() -> None:
    doc = {
        "source": "dcgm",
        "samples_in_window": 20,
        "gpus": [{"name": "NVIDIA H100 80GB HBM3", "util_pct": {"mean": 40.0, "max": 90.0}}],
        "power_w": {"mean": 400.0, "max": 410.0},
        "energy_j": {"value": 4000.0, "method": "counter"},
        "per_output_token_j": {"value": 0.5, "ci": [0.4, 0.6]},
        "per_good_request_j": {"value": 30.0, "ci": None, "reason": "n too small"},
    }
    first, second = text_lines(doc)
    assert "1 x NVIDIA H100 80GB HBM3 (dcgm)" in first and "power 400 W mean" in first
    assert "4000 J in the window (counter)" in second
    assert "500 mJ per output token [400 mJ, 600 mJ]" in second
    assert "30 J per good request (no interval: n too small)" in second
    assert math.isfinite(doc["energy_j"]["value"])
