"""Power and clocks per phase of a GPU benchmark run.

Reads nvidia-smi samples (csv, no header, no units: timestamp, power.draw,
power.limit, clocks.sm, clocks_event_reasons.sw_power_cap) and a phases file
("YYYY/MM/DD HH:MM:SS.frac name" per line, in order; the last marks the end).
Samples drawing under a quarter of the power limit (start-up, compilation)
are left out, so each phase shows what its training steps drew.
"""

import datetime
import statistics
import sys


def when(text):
    date, clock = text.strip().split(" ")[:2]
    whole, _, frac = clock.partition(".")
    stamp = datetime.datetime.strptime(f"{date} {whole}", "%Y/%m/%d %H:%M:%S")
    return stamp + datetime.timedelta(seconds=float("0." + (frac or "0")))


def main(samples_path, phases_path):
    phases = []
    for line in open(phases_path):
        if line.strip():
            date, clock, name = line.strip().split(" ", 2)
            phases.append((when(f"{date} {clock}"), name))
    samples = []
    for line in open(samples_path):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 5:
            continue
        try:
            samples.append((when(fields[0]), float(fields[1]), float(fields[2]), float(fields[3]),
                            fields[4].lower() in ("active", "1")))
        except ValueError:
            continue
    print(f"{'phase':40s} {'samples':>7s} {'power W':>8s} {'limit W':>8s} {'SM MHz':>7s} {'capped':>7s}")
    for (start, name), (end, _) in zip(phases, phases[1:]):
        mine = [s for s in samples if start <= s[0] < end and s[1] >= s[2] / 4]
        if not mine:
            print(f"{name:40s} {0:7d}")
            continue
        print(f"{name:40s} {len(mine):7d} {statistics.median(s[1] for s in mine):8.0f} "
              f"{mine[0][2]:8.0f} {statistics.median(s[3] for s in mine):7.0f} "
              f"{100 * sum(s[4] for s in mine) / len(mine):6.0f}%")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
