// Which link, host or rank makes a job slow, from its measurements
// (doctor/measurements.h). Collectives are synchronous, so one slow part makes
// every rank slow and every rank wait: the analysis looks for the part whose
// own measurements differ from those of its peers.
//
// Links. Each directed link a -> b has up to three throughputs: the data
// path's now (link.a.b.gbps, or path_gbps where the kernel has a view of the
// path: TCP, whose queue view makes a ring link streaming at a slow pipeline's
// pace look slow however healthy its path), the latest active probe
// (probe_gbps, links between hosts) and, from dumps, the whole window since the
// connection opened.
// Each is compared with the *typical link of its kind*: links within a host
// (shared memory) and links between hosts (a network) differ by an order of
// magnitude, so they are never compared with each other. "Typical" is the 75th
// percentile of that kind's links, not the median: with one slow host of four,
// half of the links between hosts touch it, and a median would sit between the
// two groups; up to half of a kind's links may be slow and the reference is
// still a healthy one. A kind needs kMinLinks measured links to be judged.
// slowness = typical / measured; a link is slow when its slowness reaches
// slowFactor (6: a sixth of the typical throughput). Healthy links scatter: on
// an oversubscribed host (8 ranks on 2 cores) we measured healthy links up to
// 4.5x below the 75th percentile, with bottleneck fractions up to 0.15, while
// throttled links, shaped NICs and hosts measured 15x to 50x below it. The
// window's throughput between hosts (the transport counters since the
// connections opened; on TCP the kernel's view of the path) averages seconds of
// traffic and scatters far less: healthy links within 1.6x of the 75th
// percentile, links slowed for the fault's part of the window (or flapping) 2.6x
// to 5x below it: windowSlowFactor 2.5 between hosts. Within a host the window
// is the queue's view, which scatters like the data path's: slowFactor there.
// The data path's moving average of a TCP link scatters the most: the links of a
// ring stream continuously and measure several times below the typical link
// whatever their health, so where a link has a window, its data-path verdict
// needs the window to agree (windowConfirm: 2x below typical; a ring link
// downstream of a slow NIC measured 18x slow now, 1.6x over the window).
//
// The data path's throughput alone cannot blame a link: in a pipeline every
// link carries data at the slowest one's pace, so senders upstream of a slow
// link have data queued (low throughput) only because their receivers are held
// up, and a sender whose receiver arrives late (a compute straggler) has its
// data queued until the receiver comes. Only the slow link holds back both its
// ends: its sender has data queued and its receiver waits for it. So a data
// path throughput counts only when the link's bottleneck fraction (the smaller
// of the two ends' shares of the time, docs/attributes.md) reaches
// minBottleneck, or is unknown. Probes measure a link alone, and count for
// links the data path does not measure now (a probe that competes with a
// collective on a busy link, or on a CPU-starved host, can look ten times slow).
//
// Grouping: the fewest culprits that explain the slow links. A group of links
// (one direction) is slow when at least two of its measured links are slow and
// they are at least hostShare (2/3) of them.
//   1. A host (of at least two) whose links to other hosts are slow in one
//      direction, from at least two of its ranks when two or more of its ranks
//      have such links measured (one rank's slow sends are that rank's, not its
//      host's): slow_host, "out" (its NIC sends slowly), "in" or "both" (every
//      link of the host).
//   2. A rank whose outgoing (or incoming) links, those a slow host does not
//      explain, are slow: comm_straggler - it straggles in its own
//      communication (a rank alone on its host is its host: slow_host).
//   3. The other slow links between two hosts, when every measured link from
//      the one to the other is slow: one slow_link finding for the path (the
//      shaper or the switch port between them), blaming its senders.
//   4. Every other slow link: slow_link.
// A link slow only over the window (fine now, or without a current value) is
// reported as having been slow: it recovered or it flaps.
//
// Compute stragglers. rank.r.idle_us is r's time between collectives, outside
// the library. A rank late by L = its idle time minus the median of the
// others' is a compute straggler when L is at least minLateUs (1 ms: below
// that, scheduling noise) and at least lateShare (1/5) of the typical time per
// collective (it costs every collective a fifth or more: the others wait L
// for it). Dumps have per-collective start and end times, which dump_analysis
// uses instead (it also sees when the lateness began and ended).
// A late rank's own sends are not judged: a sender's busy clock (data queued,
// docs/attributes.md) stops only when the sender next looks at its queue, so
// it runs through the compute that makes the rank late, and every link out of
// a compute straggler would look slow.
#pragma once

#include <vector>

#include "doctor/measurements.h"
#include "doctor/verdict.h"

namespace theseus::doctor {

struct Thresholds {
  static constexpr int kMinLinks = 3;  // measured links of a kind (host, rank) before it is judged
  double slowFactor = 6;               // typical / measured throughput at which a link is slow
  double windowSlowFactor = 2.5;       // the same for the window's throughput between hosts (the kernel's view)
  double windowConfirm = 2;            // a data-path verdict needs the window at least this slow, when known
  double minBottleneck = 0.15;         // a data-path throughput blames a link only at this bottleneck fraction
  double windowMinBottleneck = 0.05;   // the same over the window between hosts (it includes the start-up)
  double hostShare = 2.0 / 3;          // share of a host's (a rank's) measured links that must be slow
  double minLateUs = 1000;             // compute stragglers: at least this late ...
  double lateShare = 0.2;              // ... and this share of the typical time per collective
};

// Slow hosts, communication stragglers and slow links (in that order), then
// compute stragglers from rank.*.idle_us - unless `lateRanks` says which ranks
// arrive late (the per-collective arrivals of dumps): then no idle-time
// findings. The send side of a late rank is not judged: its transports' busy
// clocks run until its next send, through the compute that makes it late.
std::vector<Finding> analyzePerformance(const Measurements& m, const Thresholds& t = {},
                                        const std::vector<int>* lateRanks = nullptr);

// Whether a rank late by lateUs per collective, where collectives typically take
// typicalCollUs, is a compute straggler (shared with the per-collective analysis).
bool isLate(double lateUs, double typicalCollUs, const Thresholds& t);

// The p-th quantile (0..1) of `v` (nearest rank; v is reordered); -1 when empty.
double quantile(std::vector<double> v, double p);

}  // namespace theseus::doctor
