"""ns-3 as a packet-level peer: the same flows on the same links and routes, carried by real TCP.

Each flowmodel link (``link_src[l] -> link_dst[l]``, capacity bytes/s, latency s) becomes one direction
of an ns-3 point-to-point channel; a link and its reverse share a channel, and a link without a reverse
gets one of the same rate (the ACKs need a way back). Every flow is one TCP connection (``BulkSend``
of exactly its bytes into its own ``PacketSink``) pinned to its route: the destination host owns one
extra /32 address per flow and every node on the route has a static host route for it. ns-3 3.44 has
no per-flow ECMP, and routing differences swamp every TCP effect, so routes are never left to ns-3.

TCP is configured as a datacenter stack, not ns-3's defaults: 1448-byte segments (a 1500-byte MTU with
timestamps), an RTO of at least 1 ms plus the flow's path RTT (``MIN_RTO``; Linux's floor is the smoothed RTT
plus rto_min; clock granularity 1 ms), delayed ACKs every ``ack_every`` segments (2, as
Linux does) with a 50 us timeout (far below MinRto), initial window 10 segments, SACK on, socket
buffers of ``window`` bytes (large by default, so that only congestion limits a flow). Queues:
``newreno`` and ``cubic`` use a drop-tail device queue of ``buffer`` packets on switch ports (ns-3's
default FqCoDel queue disc is removed), a long link's ports at least one bandwidth-delay product of it,
and on the hosts' NICs a fair queue (FqCoDel with CoDel off) that holds every window its flows send, as
for DCTCP below (with a 400-packet drop-tail FIFO there, an 8-host all-to-all under NewReno lost 1,806
packets, most at the senders' own NICs, and its last flows waited out a 1 ms MinRto: 5.03 ms, against
2.98 ms with the fair queue and none lost; its makespan moved one for one with MinRto);
``dctcp`` RED as a step ECN marker at ``dctcp_k`` packets on switch ports and, on the hosts' NICs (the
flows' end nodes), FqCoDel marking CE above ``dctcp_k`` packets of sojourn (RED on the NICs too once ran
a ring on one switch at 70% of the link rate, measured while the peer marked at 1 packet whatever K
said; not rechecked); K is at least C x RTT / 7 at each port (the DCTCP paper's rule), RTT the
longest round trip of the flows through it, and the port's buffer at least 2K (a host's NIC holds
every window its flows send through it as well, so that a host never drops its own packets; Linux gets
that by holding the socket back, TCP small queues, which also keeps its qdisc short, where here the
queue, and its CE marks, build at the NIC); ``fqcodel`` NewReno over FqCoDel everywhere.

A finish time is FlowMonitor's time of the flow's last received packet: the sender's ACK of the
receiver's FIN, about one RTT after the last data byte arrives (about 13 us after it for one 1.6 MB
flow over two 40 Gbps, 1 us hops: 4% of its time; the profiles' handshake RTT absorbs part of it).
Retransmissions are the data packets sent beyond ``ceil(bytes / 1448)``, drops the packets
of the flow sent but never received. ACKs go to the address TCP picks (its first hop's interface), pinned
along the reverse of the first flow from that source through each node: flows from one host that take
different paths share their ACKs' path.

With ``trace=True`` a result also holds every change of each flow's congestion window, slow-start threshold
and congestion state (:class:`WindowTrace`): where slow start ended, what each loss or mark cut, which flow
waited out a retransmission timeout. ``experiments/validation/windows.py`` prints them per case.

Every run happens in a child process (``python -m flowmodel.peers.ns3``; ns-3's simulator is global
state, and its first import compiles bindings for ~7 s), which takes several instances at once and
exchanges ``.npz`` files. ns-3 comes from PyPI: ``pip install "flowmodel[ns3]"`` (``ns3==3.44.post0``).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from ._child import child_env

VARIANTS = ("newreno", "cubic", "dctcp", "fqcodel")
SEGMENT = 1448  # TCP payload of a 1500-byte IPv4 packet with the timestamp option
WIRE = 1502     # those 1500 bytes plus the 2-byte PPP header of ns-3's point-to-point links
INITIAL_WINDOW = 10  # segments
MIN_RTO = 1e-3  # s: rto_min, as datacenter stacks tune it; a flow's RTO is at least this plus its path's RTT


# ns-3's TcpSocketState::TcpCongState_t, the values of a WindowTrace's congestion states
STATES = ("open", "disorder", "cwr", "recovery", "loss")
CWND, SSTHRESH, STATE = 0, 1, 2  # WindowTrace.kind
UNSET = 2.0 ** 32 - 1  # a slow-start threshold not yet set (ns-3's initial one, UINT32_MAX)


@dataclasses.dataclass(frozen=True)
class WindowTrace:
    """Every change of the flows' TCP state, in time order (E events over all flows): each flow's
    congestion window first at its start, at the initial window.

    flow: int[E].  time: float[E] s.  kind: int[E], ``CWND``, ``SSTHRESH`` or ``STATE``.
    value: float[E], bytes (a window or threshold) or the index of the state entered in ``STATES``.
    """

    flow: np.ndarray
    time: np.ndarray
    kind: np.ndarray
    value: np.ndarray

    def _events(self, f: int, kind: int):
        pick = (self.flow == f) & (self.kind == kind)
        return self.time[pick], self.value[pick]

    def cwnd(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(time s, bytes) of flow ``f``'s congestion window at each change."""
        return self._events(f, CWND)

    def ssthresh(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(time s, bytes) of flow ``f``'s slow-start threshold at each change: first its unset value
        (``UNSET``) as its connection opens, then every cut (the first ends slow start)."""
        return self._events(f, SSTHRESH)

    def cuts(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(time s, bytes) of every threshold flow ``f`` set: its losses', its marks' or, under Cubic, HyStart's
        exit (a threshold at the window, with no loss); the first ends slow start."""
        t, v = self.ssthresh(f)
        return t[v < UNSET], v[v < UNSET]

    def states(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        """(time s, index in ``STATES``) of each congestion state flow ``f`` entered."""
        t, v = self._events(f, STATE)
        return t, v.astype(np.int64)

    def window_at(self, f: int, t: float) -> float:
        """Flow ``f``'s congestion window (bytes) at time ``t`` (its initial window before its first change)."""
        times, values = self.cwnd(f)
        i = int(np.searchsorted(times, t, side="right")) - 1
        return float(values[max(i, 0)])


@dataclasses.dataclass(frozen=True)
class Result:
    """What ns-3 measured, per flow: finish time (s), packets lost, retransmitted data packets; the
    seconds ns-3 spent simulating (setup and import excluded); and, for an instance run with
    ``trace=True``, its flows' :class:`WindowTrace` (else None)."""

    finish: np.ndarray
    drops: np.ndarray
    retransmits: np.ndarray
    wall_s: float
    windows: WindowTrace | None = None


def available() -> bool:
    """Whether ns-3's Python bindings import (checked in a child process: the import costs ~7 s)."""
    proc = subprocess.run([sys.executable, "-c", "from ns import ns"], capture_output=True, env=child_env())
    return proc.returncode == 0


def instance(routes, sizes, capacity, link_src, link_dst, *, latency=None, start_times=None,
             variant: str = "dctcp", window: float | None = None, buffer: int = 400, dctcp_k: int = 65,
             seed: int = 1, ack_every: int = 2, trace: bool = False) -> dict:
    """Check one instance and pack it for the child (arrays in SI units; see :func:`completion_times`)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if isinstance(ack_every, bool) or not isinstance(ack_every, (int, np.integer)) or ack_every < 1:
        raise ValueError(f"ack_every: must be an integer >= 1 (segments per ACK), got {ack_every!r}")
    if not isinstance(trace, (bool, np.bool_)):
        raise ValueError(f"trace: must be True or False, got {trace!r}")
    routes = np.atleast_2d(np.asarray(routes, np.int64))
    F = routes.shape[0]
    capacity = np.asarray(capacity, np.float64)
    L = capacity.shape[0]
    link_src, link_dst = np.asarray(link_src, np.int64), np.asarray(link_dst, np.int64)
    latency = np.zeros(L) if latency is None else np.asarray(latency, np.float64)
    sizes = np.asarray(sizes, np.float64)
    start_times = np.zeros(F) if start_times is None else np.asarray(start_times, np.float64)
    for name, arr, shape in (("link_src", link_src, (L,)), ("link_dst", link_dst, (L,)), ("latency", latency, (L,)),
                             ("sizes", sizes, (F,)), ("start_times", start_times, (F,))):
        if arr.shape != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    bad = np.flatnonzero(~(np.isfinite(capacity) & (capacity > 0)))
    if bad.size:
        raise ValueError(f"capacity[{bad[0]}]: ns-3 links need a finite rate > 0, got {capacity[bad[0]]}")
    bad = np.flatnonzero(~(np.isfinite(sizes) & (sizes >= 1)))
    if bad.size:
        raise ValueError(f"sizes[{bad[0]}]: must be >= 1 byte, got {sizes[bad[0]]}")
    bad = np.flatnonzero(~(np.isfinite(start_times) & (start_times >= 0)))
    if bad.size:
        raise ValueError(f"start_times[{bad[0]}]: must be >= 0 and finite, got {start_times[bad[0]]}")
    if np.any(latency < 0) or not np.all(np.isfinite(latency)):
        raise ValueError("latency: must be >= 0 and finite")
    if window is not None and not (np.isfinite(window) and window >= SEGMENT):
        raise ValueError(f"window: must be >= {SEGMENT} bytes (or None), got {window!r}")
    for f, route in enumerate(routes):
        hops = route[route >= 0]
        if hops.size == 0 or np.any(hops >= L):
            raise ValueError(f"routes[{f}]: needs 1 or more link indices below {L}, got {route.tolist()}")
        if np.any(link_dst[hops[:-1]] != link_src[hops[1:]]):
            raise ValueError(f"routes[{f}]: links {hops.tolist()} do not form a path")
        if link_src[hops[0]] == link_dst[hops[-1]]:
            raise ValueError(f"routes[{f}]: starts and ends at node {link_src[hops[0]]}")
    return dict(routes=routes, sizes=sizes, capacity=capacity, latency=latency, link_src=link_src, link_dst=link_dst,
                start_times=start_times, variant=np.array(variant), window=np.float64(window or 0.0),
                buffer=np.int64(buffer), dctcp_k=np.int64(dctcp_k), seed=np.int64(seed), ack_every=np.int64(ack_every),
                trace=np.bool_(trace))


def run(instances: list[dict], *, timeout: float = 1800.0) -> list[Result]:
    """Simulate several prepared instances (:func:`instance`) in one child process, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, arrays in enumerate(instances):
            src, dst = os.path.join(tmp, f"in{i}.npz"), os.path.join(tmp, f"out{i}.npz")
            np.savez(src, **arrays)
            paths += [src, dst]
        try:
            proc = subprocess.run([sys.executable, "-m", "flowmodel.peers.ns3", *paths], capture_output=True,
                                  text=True, timeout=timeout, env=child_env())
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"ns-3 child exceeded its time limit of {timeout:.0f} s") from e
        results = []
        for i in range(len(instances)):
            dst = paths[2 * i + 1]
            if proc.returncode != 0 or not os.path.exists(dst):
                raise RuntimeError(f"ns-3 child failed (exit {proc.returncode}) on instance {i}: {proc.stderr[-2000:]}")
            with np.load(dst) as out:
                if "error" in out.files:
                    raise RuntimeError(f"ns-3 instance {i}: {out['error']}")
                windows = (WindowTrace(out["trace_flow"], out["trace_time"], out["trace_kind"], out["trace_value"])
                           if "trace_flow" in out.files else None)
                results.append(Result(out["finish"], out["drops"], out["retransmits"], float(out["wall_s"]),
                                      windows))
        return results


def completion_times(routes, sizes, capacity, link_src, link_dst, *, latency=None, start_times=None,
                     variant: str = "dctcp", window: float | None = None, buffer: int = 400, dctcp_k: int = 65,
                     seed: int = 1, ack_every: int = 2, trace: bool = False, timeout: float = 1800.0) -> Result:
    """Per-flow finish times of TCP ``variant`` in ns-3, every flow pinned to its route.

    Args:
      routes: int[F, H] link indices (-1 pads), each a path from its first link's source node.
      sizes: float[F] bytes (rounded to whole bytes).  capacity: float[L] bytes/s, finite.
      link_src, link_dst: int[L] node ids of each link's ends (``FabricInfo.src`` / ``.dst``).
      latency: float[L] propagation delay (s; a channel takes its forward link's).
      start_times: float[F] s.  variant: one of ``VARIANTS``.
      window: socket buffer bytes (send and receive) per connection; None: 64 MiB.
      buffer: queue per port (packets).  dctcp_k: DCTCP marking threshold (packets).
      ack_every: the receiver's delayed-ACK count (segments per ACK; 1 ACKs every segment).
      trace: also record every flow's window, threshold and state changes (``Result.windows``).
    """
    return run([instance(routes, sizes, capacity, link_src, link_dst, latency=latency, start_times=start_times,
                         variant=variant, window=window, buffer=buffer, dctcp_k=dctcp_k, seed=seed,
                         ack_every=ack_every, trace=trace)],
               timeout=timeout)[0]


def _channels(link_src, link_dst):
    """Pair every link with an unpaired reverse link: channel of each link and which end sends on it."""
    channel, end, ends = np.full(len(link_src), -1), np.zeros(len(link_src), np.int64), []
    spare: dict[tuple[int, int], list[int]] = {}
    for li, (u, v) in enumerate(zip(link_src.tolist(), link_dst.tolist())):
        back = spare.get((v, u))
        if back:
            channel[li], end[li] = channel[back.pop()], 1
        else:
            channel[li] = len(ends)
            ends.append((u, v, li))
            spare.setdefault((u, v), []).append(li)
    return channel, end, ends


# what the child does to each flow's socket as it opens (C++: a Python callback per ACK would cost more than the
# simulation): floor its RTO, and trace its windows where asked
_HOOK_CODE = r"""
#include <string>
#include <vector>
namespace flowmodel_trace {
std::vector<int> flow, kind;
std::vector<double> time, value;
void add(const std::string& f, int k, double v, double t) {
    flow.push_back(std::stoi(f));
    kind.push_back(k);
    time.push_back(t);
    value.push_back(v);
}
double now() { return ns3::Simulator::Now().GetSeconds(); }
void cwnd(std::string f, uint32_t, uint32_t to) { add(f, 0, to, now()); }
void ssthresh(std::string f, uint32_t, uint32_t to) { add(f, 1, to, now()); }
void state(std::string f, ns3::TcpSocketState::TcpCongState_t, ns3::TcpSocketState::TcpCongState_t to) {
    add(f, 2, (double)to, now());
}
void hook(ns3::Ptr<ns3::Application> app, int f, double start, double min_rto, double initial, bool traced) {
    auto socket = ns3::DynamicCast<ns3::BulkSendApplication>(app)->GetSocket();
    socket->SetAttribute("MinRto", ns3::TimeValue(ns3::Seconds(min_rto)));
    if (!traced) {
        return;
    }
    std::string name = std::to_string(f);
    add(name, 0, initial, start);  // the window it opens with
    socket->TraceConnect("CongestionWindow", name, ns3::MakeCallback(&cwnd));
    socket->TraceConnect("SlowStartThreshold", name, ns3::MakeCallback(&ssthresh));
    socket->TraceConnect("CongState", name, ns3::MakeCallback(&state));
}
// the application makes its socket when it starts (and sends its SYN): hook it just after
void at_start(ns3::Ptr<ns3::Application> app, int f, double start, double min_rto, double initial, bool traced) {
    ns3::Simulator::Schedule(ns3::Seconds(start) + ns3::NanoSeconds(1), &hook, app, f, start, min_rto, initial,
                             traced);
}
void clear() { flow.clear(); kind.clear(); time.clear(); value.clear(); }
}
"""


def _socket_hooks():
    """The C++ socket hooks and trace sinks, compiled once per child, their trace cleared."""
    import cppyy

    if not hasattr(cppyy.gbl, "flowmodel_trace"):
        cppyy.cppdef(_HOOK_CODE)
    cppyy.gbl.flowmodel_trace.clear()
    return cppyy.gbl.flowmodel_trace


def _simulate(ns, data) -> dict:
    routes, sizes, capacity, latency = data["routes"], data["sizes"], data["capacity"], data["latency"]
    link_src, link_dst, starts = data["link_src"], data["link_dst"], data["start_times"]
    variant, window = str(data["variant"]), float(data["window"]) or float(64 << 20)
    F = routes.shape[0]
    hooks, traced = _socket_hooks(), bool(data.get("trace", False))
    ns.RngSeedManager.SetSeed(int(data["seed"]))
    ns.RngSeedManager.SetRun(1)
    # random streams are numbered on from the last instance's unless reset: an instance's result would depend
    # on what ran before it in the same child (one case moved 0.4% between batches)
    ns.RngSeedManager.ResetNextStreamIndex()
    socket = {"newreno": "ns3::TcpNewReno", "cubic": "ns3::TcpCubic", "dctcp": "ns3::TcpDctcp",
              "fqcodel": "ns3::TcpNewReno"}[variant]
    defaults = [
        ("ns3::TcpL4Protocol::SocketType", ns.TypeIdValue(ns.TypeId.LookupByName(socket))),
        ("ns3::TcpSocket::SegmentSize", ns.UintegerValue(SEGMENT)),
        ("ns3::TcpSocket::InitialCwnd", ns.UintegerValue(INITIAL_WINDOW)),
        ("ns3::TcpSocket::DelAckCount", ns.UintegerValue(int(data["ack_every"]))),
        ("ns3::TcpSocket::DelAckTimeout", ns.TimeValue(ns.MicroSeconds(50))),
        ("ns3::TcpSocket::SndBufSize", ns.UintegerValue(int(window))),
        ("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(int(window))),
        ("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(MIN_RTO))),  # each flow's floor: below
        # keep the 1 ms granularity: timestamps measure RTTs in ms, and a finer one set the RTO a hair above
        # a long-haul RTT (spurious timeouts stalled a 1,000 km flow)
        ("ns3::TcpSocketBase::ClockGranularity", ns.TimeValue(ns.MilliSeconds(1))),
        ("ns3::TcpSocketBase::Sack", ns.BooleanValue(True)),
        ("ns3::RedQueueDisc::UseEcn", ns.BooleanValue(True)),
        ("ns3::RedQueueDisc::UseHardDrop", ns.BooleanValue(False)),
        ("ns3::RedQueueDisc::ARED", ns.BooleanValue(False)),
        ("ns3::RedQueueDisc::Gentle", ns.BooleanValue(False)),
        ("ns3::RedQueueDisc::QW", ns.DoubleValue(1.0)),  # DCTCP marks on the instantaneous queue
        ("ns3::RedQueueDisc::MeanPktSize", ns.UintegerValue(1500)),
    ]
    for name, value in defaults:
        ns.Config.SetDefault(name, value)

    n_nodes = int(max(link_src.max(), link_dst.max())) + 1
    nodes = ns.NodeContainer()
    nodes.Create(n_nodes)
    ns.InternetStackHelper().Install(nodes)
    channel, end, ends = _channels(link_src, link_dst)
    reverse = {}
    for li in range(len(link_src)):
        if end[li] == 1:
            reverse[int(channel[li])] = li
    addresses = ns.Ipv4AddressHelper()
    addresses.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.252"))
    p2p = ns.PointToPointHelper()
    queued = variant in ("dctcp", "fqcodel")  # the queue disc holds the buffer; the device queue stays short
    flow_hops = [r[r >= 0] for r in routes]
    hosts = {int(link_src[h[0]]) for h in flow_hops} | {int(link_dst[h[-1]]) for h in flow_hops}
    tc = ns.TrafficControlHelper()
    devices, iface = [], []
    # the longest round trip of the flows through each link: DCTCP's K > C x RTT / 7 takes the paths' RTT (with
    # each link's own, the near host's NIC of two flows over 500 km marked at 65 packets: 4.6x Cubic's time)
    delay = latency[[fwd for _, _, fwd in ends]][channel]  # ns-3 gives a channel its forward link's delay
    path_rtt = np.zeros(len(link_src))
    for h in flow_hops:
        np.maximum.at(path_rtt, h, 2 * delay[h].sum())
    first_hops = np.bincount([h[0] for h in flow_hops], minlength=len(link_src))
    for c, (u, v, fwd) in enumerate(ends):
        # a long link's ports buffer one bandwidth-delay product of it
        bdp = max(capacity[fwd], capacity[reverse.get(c, fwd)]) * 2 * latency[fwd] / 1500
        buffer = max(int(data["buffer"]), int(np.ceil(bdp)))
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                     ns.QueueSizeValue(ns.QueueSize(f"{2 if queued else buffer}p")))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(int(round(latency[fwd] * 1e9)))))
        devs = p2p.Install(nodes.Get(u), nodes.Get(v))
        back = reverse.get(c, fwd)
        for side, link in ((0, fwd), (1, back)):
            bps = int(round(capacity[link] * 8))
            devs.Get(side).SetAttribute("DataRate", ns.DataRateValue(ns.DataRate(bps)))
        ifc = addresses.Assign(devs)
        addresses.NewNetwork()
        if variant != "fqcodel":
            tc.Uninstall(devs)
            for side, node, link in ((0, u, fwd), (1, v, back)):  # link: this side's egress
                # a host never drops its own packets: its queue holds every window its sockets send through it
                # (Linux holds the socket back instead: TCP small queues)
                held = int(np.ceil(first_hops[link] * window / SEGMENT)) if node in hosts else 0
                qdisc = ns.TrafficControlHelper()
                if variant == "dctcp":
                    mark_k = max(float(data["dctcp_k"]), bdp / 7, capacity[link] * path_rtt[link] / 1500 / 7)
                    size = max(buffer, int(np.ceil(2 * mark_k)), held)
                    if node in hosts:  # a host's fq qdisc, marking CE above K packets' worth of sojourn
                        ce = ns.NanoSeconds(int(mark_k * WIRE / capacity[link] * 1e9))
                        qdisc.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "UseEcn", ns.BooleanValue(True),
                                               "CeThreshold", ns.TimeValue(ce),
                                               "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{size}p")))
                    else:  # a switch port: RED as a step marker at K
                        qdisc.SetRootQueueDisc("ns3::RedQueueDisc", "MinTh", ns.DoubleValue(mark_k),
                                               "MaxTh", ns.DoubleValue(mark_k + 1),
                                               "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{size}p")))
                elif node in hosts:  # loss-based: a fair queue with CoDel off, so that it drops nothing
                    qdisc.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "Target", ns.StringValue("1000s"),
                                           "Interval", ns.StringValue("1000s"),
                                           "MaxSize", ns.QueueSizeValue(ns.QueueSize(f"{max(buffer, held)}p")))
                    dev = ns.DynamicCast[ns.PointToPointNetDevice](devs.Get(side))
                    dev.GetQueue().SetMaxSize(ns.QueueSize("2p"))  # the queue disc holds the window
                else:  # a loss-based switch port: its drop-tail device queue of ``buffer`` packets
                    continue
                qdisc.Install(ns.NetDeviceContainer(devs.Get(side)))
        devices.append(devs)
        iface.append(ifc)

    def ipv4(node):
        return nodes.Get(int(node)).GetObject[ns.Ipv4]()

    static = ns.Ipv4StaticRoutingHelper()
    mask32 = ns.Ipv4Mask("255.255.255.255")
    sinks, expected = [], np.ceil(sizes / SEGMENT)
    port_of = {}
    for f in range(F):
        hops = flow_hops[f]
        s, d = int(link_src[hops[0]]), int(link_dst[hops[-1]])
        dst_addr = ns.Ipv4Address(0x0B000001 + f)
        ipv4(d).AddAddress(1, ns.Ipv4InterfaceAddress(dst_addr, mask32))
        # TCP takes the source address of its first hop's interface (3.44 rebinds it on connect), so the
        # ACKs are routed to that address: along the reverse of the first flow through each node
        c0, k0 = int(channel[hops[0]]), int(end[hops[0]])
        src_addr = iface[c0].GetAddress(k0)
        for link in hops:
            ch, side = int(channel[link]), int(end[link])
            u, v = int(link_src[link]), int(link_dst[link])
            out_u = ipv4(u).GetInterfaceForDevice(devices[ch].Get(side))
            out_v = ipv4(v).GetInterfaceForDevice(devices[ch].Get(1 - side))
            static.GetStaticRouting(ipv4(u)).AddHostRouteTo(dst_addr, iface[ch].GetAddress(1 - side), out_u)
            if link != hops[0]:
                static.GetStaticRouting(ipv4(v)).AddHostRouteTo(src_addr, iface[ch].GetAddress(side), out_v)
        port = port_of[d] = port_of.get(d, 999) + 1
        sink_helper = ns.PacketSinkHelper("ns3::TcpSocketFactory",
                                          ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo())
        sink = sink_helper.Install(nodes.Get(d))
        sink.Start(ns.Seconds(0.0))
        sinks.append(sink.Get(0))
        bulk = ns.BulkSendHelper("ns3::TcpSocketFactory", ns.InetSocketAddress(dst_addr, port).ConvertTo())
        bulk.SetAttribute("MaxBytes", ns.UintegerValue(int(round(sizes[f]))))
        bulk.SetAttribute("SendSize", ns.UintegerValue(SEGMENT * 16))
        app = bulk.Install(nodes.Get(s))
        app.Start(ns.Seconds(float(starts[f])))
        # Linux's RTO is at least the smoothed RTT plus rto_min; ns-3's is at least MinRto, and its RTT samples come
        # from the timestamps' 1 ms ticks (0 or 1 ms at 100 km): with MinRto alone the first ACK of a flow that
        # queues 14 us behind others at 100 km came after a 1 ms RTO, and the spurious timeout left its window at 2
        # segments for the rest of its transfer (8 equal flows over 100 km, flows starting within 10 us: 231 ms;
        # with the floor, 142 ms)
        rto = MIN_RTO + 2 * float(delay[hops].sum())
        hooks.at_start(app.Get(0), f, float(starts[f]), rto, float(INITIAL_WINDOW * SEGMENT), traced)

    monitor_helper = ns.FlowMonitorHelper()
    monitor = monitor_helper.InstallAll()
    # a generous horizon (TCP over long links can run far below the link rate), after which unfinished flows
    # are an error; simulated time costs little, packets do
    horizon = float(starts.max() + np.sum(sizes) / capacity.min() * 50 + 10.0)
    ns.Simulator.Stop(ns.Seconds(horizon))
    t0 = time.perf_counter()
    ns.Simulator.Run()
    wall = time.perf_counter() - t0

    monitor.CheckForLostPackets()
    classifier = monitor_helper.GetClassifier()
    classifier = ns.DynamicCast[ns.Ipv4FlowClassifier](classifier) if hasattr(ns, "DynamicCast") else classifier
    finish, drops, retx = np.full(F, np.nan), np.zeros(F), np.zeros(F)
    for item in monitor.GetFlowStats():
        flow_id, st = item.first, item.second
        dst = classifier.FindFlow(flow_id).destinationAddress.Get()
        f = dst - 0x0B000001
        if 0 <= f < F:
            finish[f] = st.timeLastRxPacket.GetSeconds()
            drops[f] = st.txPackets - st.rxPackets  # device-queue drops are not traced by FlowMonitor
            retx[f] = max(st.txPackets - expected[f] - 3, 0)  # SYN, ACK of the handshake, FIN
    received = np.array([int(sink.GetObject[ns.PacketSink]().GetTotalRx()) for sink in sinks])
    ns.Simulator.Destroy()
    short = np.flatnonzero(received < np.round(sizes))
    if short.size:
        f = short[0]
        return dict(error=np.array(f"flow {f} received {received[f]} of {int(round(sizes[f]))} bytes by the horizon "
                                   f"{horizon:.3g} s ({short.size} flows unfinished)"))
    out = dict(finish=finish, drops=drops, retransmits=retx, wall_s=np.float64(wall))
    if traced:
        order = np.argsort(np.asarray(list(hooks.time)), kind="stable")
        out.update(trace_flow=np.asarray(list(hooks.flow), np.int64)[order],
                   trace_time=np.asarray(list(hooks.time), np.float64)[order],
                   trace_kind=np.asarray(list(hooks.kind), np.int64)[order],
                   trace_value=np.asarray(list(hooks.value), np.float64)[order])
    return out


def _child(paths: list[str]) -> None:
    from ns import ns

    for src, dst in zip(paths[::2], paths[1::2]):
        with np.load(src) as data:
            out = _simulate(ns, {k: data[k] for k in data.files})
        np.savez(dst, **out)
    sys.stdout.flush()


if __name__ == "__main__":
    _child(sys.argv[1:])

