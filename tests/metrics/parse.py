#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Reads rlock_client_metrics_text's output with prometheus_client's own
parser (python3-prometheus-client), and checks the figures it is told to
expect.

    parse.py FILE [NAME=VALUE | NAME{LABEL=VALUE}=VALUE ...]

Every sample must carry the server and prefix labels; every histogram's
buckets must be cumulative, end in +Inf, and agree with its _count. Exits
0, or 1 naming what is wrong (a text the parser refuses raises)."""
import sys

from prometheus_client.parser import text_string_to_metric_families


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    samples = []
    kinds = {}
    for fam in text_string_to_metric_families(text):
        kinds[fam.name] = fam.type
        for s in fam.samples:
            samples.append(s)
            if "server" not in s.labels or "prefix" not in s.labels:
                print("sample without server/prefix labels:", s)
                return 1
    for name, kind in kinds.items():
        if kind != "histogram":
            continue
        buckets = [s for s in samples if s.name == name + "_bucket"]
        counts = [s.value for s in samples if s.name == name + "_count"]
        if not buckets or buckets[-1].labels["le"] != "+Inf":
            print(name, "has no +Inf bucket")
            return 1
        values = [b.value for b in buckets]
        if values != sorted(values) or values[-1] != counts[0]:
            print(name, "buckets not cumulative or not its count:", values,
                  counts)
            return 1
    for want in sys.argv[2:]:
        key, value = want.rsplit("=", 1)
        label = None
        if "{" in key:
            key, label = key[:-1].split("{")
            label = tuple(label.split("="))
        found = [s for s in samples if s.name == key and
                 (label is None or s.labels.get(label[0]) == label[1])]
        if len(found) != 1 or found[0].value != float(value):
            print("want", want, "found", found)
            return 1
    print("ok: %d families, %d samples" % (len(kinds), len(samples)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
