#!/usr/bin/python3
"""Scrapes a Theseus metrics endpoint and checks it with Prometheus' own parser
(Debian's python3-prometheus-client): the text must parse, and the families and values
the metrics test expects must be there.

usage: scrape_metrics.py PORT RANK NRANKS ALLREDUCES
Prints one line per check; exit status 0 when every check passed."""
import sys
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    port, rank, nranks, allreduces = (int(a) for a in sys.argv[1:5])
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    def samples(family, **labels):
        f = families.get(family)
        if f is None:
            return []
        return [s for s in f.samples if all(s.labels.get(k) == v for k, v in labels.items())]

    mine = {"rank": str(rank)}
    # The parser strips _total from counter family names.
    for name, kind in [("theseus_operations", "counter"), ("theseus_operation_bytes", "counter"),
                       ("theseus_operation_duration_seconds", "histogram"), ("theseus_peer_sent_bytes", "counter"),
                       ("theseus_peer_received_bytes", "counter"), ("theseus_peer_receive_wait_seconds", "counter"),
                       ("theseus_decision_table_version", "gauge"), ("theseus_schedule_swaps", "counter"),
                       ("theseus_schedule", "gauge"), ("theseus_communicator_failed", "gauge"),
                       ("theseus_attribute", "gauge"), ("theseus_communicators", "gauge")]:
        check(name in families and families[name].type == kind, f"family {name} is a {kind}")
    ops = samples("theseus_operations", op="allreduce", **mine)
    check(len(ops) == 1 and ops[0].value == allreduces, f"{allreduces} allreduces counted ({[s.value for s in ops]})")
    count = [s for s in samples("theseus_operation_duration_seconds", op="allreduce", **mine) if s.name.endswith("_count")]
    inf = [s for s in samples("theseus_operation_duration_seconds", op="allreduce", le="+Inf", **mine)
           if s.name.endswith("_bucket")]
    check(len(count) == 1 and count[0].value == allreduces and len(inf) == 1 and inf[0].value == allreduces,
          "the latency histogram counts every allreduce, +Inf bucket = count")
    buckets = sorted((float(s.labels["le"]), s.value) for s in
                     samples("theseus_operation_duration_seconds", op="allreduce", **mine) if s.name.endswith("_bucket"))
    check(all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "histogram buckets are cumulative")
    sent = samples("theseus_peer_sent_bytes", **mine)
    received = samples("theseus_peer_received_bytes", **mine)
    # A ring sends to one neighbour only: every peer is listed, and the bytes add up.
    check(len(sent) == nranks - 1 and len(received) == nranks - 1, "every peer listed")
    check(sum(s.value for s in sent) > 0 and sum(s.value for s in received) > 0,
          f"bytes sent and received ({[s.value for s in sent]}, {[s.value for s in received]})")
    check(any(s.labels.get("collective") == "allreduce" for s in samples("theseus_schedule", **mine)),
          "the schedule in effect for allreduce")
    failed = samples("theseus_communicator_failed", **mine)
    check(len(failed) == 1 and failed[0].value == 0, "the communicator has not failed")
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=10)
        check(False, "another path is 404")
    except urllib.error.HTTPError as e:
        check(e.code == 404, "another path is 404")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
