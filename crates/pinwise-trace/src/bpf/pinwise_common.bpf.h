/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Maps and helpers shared by pinwise's BPF objects (pinwise.bpf.c and pinwise_nvidia.bpf.c).
 * The second object reuses the first one's maps (same definitions here), so both write to
 * the one ring buffer and read the one set of traced processes.
 */
#ifndef PINWISE_COMMON_BPF_H
#define PINWISE_COMMON_BPF_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "pinwise_events.h"

/* Processes (tgids) being traced. Value unused (1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps");

/* The one ring buffer for every probe. Its size is set by user space before loading. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

/* Counters (enum pw_counter), per CPU so that probes never contend. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PW_CNT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Hits per function or hook (enum pw_func) of traced processes, counted even when the
 * event itself is dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PW_FN_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} func_hits SEC(".maps");

/* An allocation (or registration) between its entry and its return, per thread. Shared
 * with the nvidia object, which uses it to tell page locking done inside a CUDA call. */
struct pending_call {
	/* Where the function writes the new pointer (void **), or the pointer itself for
	 * cuMemHostRegister. */
	__u64 out_ptr;
	/* cuMemAllocPitch: where it writes the pitch. */
	__u64 out_pitch;
	/* Bytes (for cuMemAllocPitch: the height; bytes = pitch x height). */
	__u64 len;
	__u64 call_site;
	/* Stack pointer at entry: tells nested calls (deeper) from a stale entry whose
	 * return was never seen (not deeper). */
	__u64 entry_sp;
	__u32 flags;
	__u16 func;
	__u8 site_source;
	/* Probed calls made inside this one (one entry point calling another): the
	 * outermost call reports, when it returns. */
	__u8 depth;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct pending_call);
} pending SEC(".maps");

/* Wake the consumer only when this much data waits (or for events that carry news it
 * must act on at once); it also polls on a timer. Set by user space. */
const volatile __u64 cfg_wakeup_bytes = 256 << 10;

static __always_inline __u32 current_tgid(void)
{
	return bpf_get_current_pid_tgid() >> 32;
}

static __always_inline int is_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced_tgids, &tgid) != 0;
}

static __always_inline void count(__u32 counter)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &counter);
	if (v)
		*v += 1;
}

static __always_inline void count_hit(__u32 func)
{
	__u64 *v = bpf_map_lookup_elem(&func_hits, &func);
	if (v)
		*v += 1;
}

/* Reserve a record of `size` bytes, or count a drop and return 0. Never blocks. */
static __always_inline void *reserve(__u64 size)
{
	void *rec = bpf_ringbuf_reserve(&events, size, 0);
	if (!rec)
		count(PW_CNT_RINGBUF_DROPS);
	return rec;
}

/* Submit a record. `urgent`: wake the consumer now (process life: it must read the
 * process's maps while the process lives); otherwise only when enough data waits (a
 * wakeup costs the traced thread about 5 us; the consumer also polls on a timer). */
static __always_inline void submit(void *rec, int urgent)
{
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (urgent || bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= cfg_wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(rec, flags);
}

static __always_inline void fill_header(struct pw_header *h, __u16 kind, __u16 func)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	h->ts_ns = bpf_ktime_get_ns();
	h->pid = pid_tgid >> 32;
	h->tid = (__u32)pid_tgid;
	h->kind = kind;
	h->func = func;
	h->_pad0 = 0;
}

#endif /* PINWISE_COMMON_BPF_H */
