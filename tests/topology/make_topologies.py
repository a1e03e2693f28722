#!/usr/bin/env python3
"""Writes the synthetic machines of the topology tests as hwloc XML (the format
lstopo --of xml writes and hwloc_topology_set_xml reads):

  two-socket-8gpu-4nic.xml  2 packages x (1 NUMA node, 4 cores, 2 PCIe switches);
                            each switch: 2 GPUs and 1 NIC (mlx5_0..3)
  two-socket-8gpu-8nic.xml  the same with 2 NICs per switch (mlx5_0..7)

GPU g is cuda<g> (an OSDev of type CoProc, as hwloc's CUDA backend names it);
NIC k is an InfiniBand PCI function with the OSDevs mlx5_<k> (OpenFabrics) and
ib<k> (Network). Run from this folder to regenerate the files.
"""
import sys


def machine(nics_per_switch):
    out = []
    gp = [0]

    def g():
        gp[0] += 1
        return gp[0]

    def put(depth, text):
        out.append("  " * depth + text)

    cores_per_pkg = 4
    all_cpus = (1 << (2 * cores_per_pkg)) - 1
    put(0, '<?xml version="1.0" encoding="UTF-8"?>')
    put(0, '<!DOCTYPE topology SYSTEM "hwloc2.dtd">')
    put(0, '<topology version="2.0">')
    put(1, f'<object type="Machine" os_index="0" cpuset="0x{all_cpus:08x}" complete_cpuset="0x{all_cpus:08x}" '
           f'allowed_cpuset="0x{all_cpus:08x}" nodeset="0x00000003" complete_nodeset="0x00000003" '
           f'allowed_nodeset="0x00000003" gp_index="{g()}">')
    put(2, '<info name="Backend" value="Synthetic (Theseus tests)"/>')
    gpu = 0
    nic = 0
    for p in range(2):
        cpus = ((1 << cores_per_pkg) - 1) << (p * cores_per_pkg)
        node = 1 << p
        sets = f'cpuset="0x{cpus:08x}" complete_cpuset="0x{cpus:08x}" nodeset="0x{node:08x}" complete_nodeset="0x{node:08x}"'
        put(2, f'<object type="Package" os_index="{p}" {sets} gp_index="{g()}">')
        put(3, f'<object type="NUMANode" os_index="{p}" {sets} gp_index="{g()}" local_memory="68719476736"/>')
        for c in range(cores_per_pkg):
            cpu = p * cores_per_pkg + c
            one = f'cpuset="0x{1 << cpu:08x}" complete_cpuset="0x{1 << cpu:08x}" nodeset="0x{node:08x}" complete_nodeset="0x{node:08x}"'
            put(3, f'<object type="Core" os_index="{cpu}" {one} gp_index="{g()}">')
            put(4, f'<object type="PU" os_index="{cpu}" {one} gp_index="{g()}"/>')
            put(3, '</object>')
        root = p * 0x80
        put(3, f'<object type="Bridge" gp_index="{g()}" bridge_type="0-1" depth="0" bridge_pci="0000:[{root:02x}-{root + 0x7f:02x}]">')
        for s in range(2):
            sec = root + 1 + s * 0x20
            put(4, f'<object type="Bridge" gp_index="{g()}" bridge_type="1-1" depth="1" pci_busid="0000:{root:02x}:{s + 1:02x}.0" '
                   f'pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846" bridge_pci="0000:[{sec:02x}-{sec + 0x1f:02x}]">')
            devices = [("gpu", gpu), ("gpu", gpu + 1)] + [("nic", nic + i) for i in range(nics_per_switch)]
            gpu += 2
            nic += nics_per_switch
            for j, (kind, index) in enumerate(devices):
                bus = sec + 1 + j
                put(5, f'<object type="Bridge" gp_index="{g()}" bridge_type="1-1" depth="2" pci_busid="0000:{sec:02x}:{j:02x}.0" '
                       f'pci_type="0604 [10b5:8747] [0000:0000] ca" pci_link_speed="15.753846" bridge_pci="0000:[{bus:02x}-{bus:02x}]">')
                if kind == "gpu":
                    put(6, f'<object type="PCIDev" gp_index="{g()}" pci_busid="0000:{bus:02x}:00.0" '
                           f'pci_type="0302 [10de:2330] [10de:16c1] a1" pci_link_speed="31.507692">')
                    put(7, f'<object type="OSDev" gp_index="{g()}" name="cuda{index}" subtype="CUDA" osdev_type="5">')
                    put(8, '<info name="CoProcType" value="CUDA"/>')
                    put(7, '</object>')
                else:
                    put(6, f'<object type="PCIDev" gp_index="{g()}" pci_busid="0000:{bus:02x}:00.0" '
                           f'pci_type="0207 [15b3:101b] [15b3:0059] 00" pci_link_speed="31.507692">')
                    put(7, f'<object type="OSDev" gp_index="{g()}" name="mlx5_{index}" osdev_type="3">')
                    put(8, '<info name="Port1State" value="4"/>')
                    put(7, '</object>')
                    put(7, f'<object type="OSDev" gp_index="{g()}" name="ib{index}" osdev_type="2"/>')
                put(6, '</object>')
                put(5, '</object>')
            put(4, '</object>')
        put(3, '</object>')
        put(2, '</object>')
    put(1, '</object>')
    put(0, '</topology>')
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    for nics, name in ((1, "two-socket-8gpu-4nic.xml"), (2, "two-socket-8gpu-8nic.xml")):
        with open(name, "w") as f:
            f.write(machine(nics))
    sys.exit(0)
