// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * pinwise_nvidia.bpf.c: kernel-side hooks into the nvidia module, where it pins and unpins
 * user pages:
 *
 *   NV_STATUS os_lock_user_pages(void *address, NvU64 page_count, void **page_array, NvU32 flags)
 *   NV_STATUS os_unlock_user_pages(NvU64 page_count, void *page_array [, NvU32 flags])
 *
 * fentry/fexit need the module's BTF (/sys/kernel/btf/nvidia). This object is separate
 * from pinwise.bpf.c so that, where the module or its BTF is missing or the kernel refuses
 * the programs, the user-space probes still load. It shares the first object's maps
 * (user space hands it their file descriptors before loading).
 *
 * Arguments are read with bpf_get_func_arg / bpf_get_func_ret, which do not depend on the
 * exact number of parameters (os_unlock_user_pages lost its flags in some driver versions).
 */
#include "pinwise_common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* What a successful lock pinned, by the page array the driver got back; the unlock only
 * knows the page array. */
struct locked_range {
	__u64 addr;
	__u64 pages;
	__u32 tgid;
	__u32 _pad0;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64); /* struct page ** */
	__type(value, struct locked_range);
} locked SEC(".maps");

SEC("fexit/os_lock_user_pages")
int on_lock_user_pages(__u64 *ctx)
{
	__u32 tgid = current_tgid();
	if (!is_traced(tgid))
		return 0;
	count_hit(PW_FN_os_lock_user_pages);
	__u64 addr = 0, pages = 0, page_array_out = 0, status = 0;
	bpf_get_func_arg(ctx, 0, &addr);
	bpf_get_func_arg(ctx, 1, &pages);
	bpf_get_func_arg(ctx, 2, &page_array_out);
	bpf_get_func_ret(ctx, &status);
	if ((__u32)status == 0 && page_array_out) {
		__u64 page_array = 0;
		bpf_probe_read_kernel(&page_array, sizeof(page_array), (void *)page_array_out);
		if (page_array) {
			struct locked_range r = { .addr = addr, .pages = pages, .tgid = tgid };
			bpf_map_update_elem(&locked, &page_array, &r, BPF_ANY);
		}
	}
	struct pw_pin_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_PIN_PAGES, PW_FN_os_lock_user_pages);
	e->addr = addr;
	e->pages = pages;
	e->status = (__u32)status;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->in_cuda_call = bpf_map_lookup_elem(&pending, &pid_tgid) != 0;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
	submit(e, 0);
	return 0;
}

SEC("fentry/os_unlock_user_pages")
int on_unlock_user_pages(__u64 *ctx)
{
	__u64 pages = 0, page_array = 0;
	bpf_get_func_arg(ctx, 0, &pages);
	bpf_get_func_arg(ctx, 1, &page_array);
	/* Only ranges locked by traced processes are in the map; the unlock may run in
	 * another context (process teardown), so it is matched by page array, not by tgid. */
	struct locked_range *r = bpf_map_lookup_elem(&locked, &page_array);
	if (!r)
		return 0;
	__u32 tgid = r->tgid;
	__u64 addr = r->addr;
	bpf_map_delete_elem(&locked, &page_array);
	count_hit(PW_FN_os_unlock_user_pages);
	struct pw_pin_event *e = reserve(sizeof(*e));
	if (!e)
		return 0;
	fill_header(&e->h, PW_EV_UNPIN_PAGES, PW_FN_os_unlock_user_pages);
	e->h.pid = tgid;
	e->addr = addr;
	e->pages = pages;
	e->status = 0;
	e->in_cuda_call = 0;
	__builtin_memset(e->_pad0, 0, sizeof(e->_pad0));
	submit(e, 0);
	return 0;
}
