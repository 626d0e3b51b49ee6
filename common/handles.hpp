// handles.hpp - ownership of verbs objects: wrap the release, never the acquire.
//
// A lesson still calls the verb that creates an object, where the reader can
// see it, and hands the result to one of these unique_ptr aliases:
//
//     wb::ProtectionDomain pd{CHECK_PTR(ibv_alloc_pd(ctx.get()))};
//
// The deleter is the matching destroy verb. Declare handles in creation
// order: C++ destroys locals in reverse order, which is exactly the order
// rdma-core requires (QP before CQ, MR before PD, PD before the context).
// Lesson 3 tears down by hand to teach that order; later lessons rely on it.
//
// A deleter that fails reports the verb, the errno name and text on stderr,
// and carries on: it never throws and never exits.
//
// The rule for what lives here: EVERY verbs object a lesson owns gets its
// alias in this file, even when one lesson alone uses it (the SRQ of lesson
// 13, the memory window of lesson 14), so that a lesson never writes a
// deleter of its own and a later lesson finds the handle where the others are.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace wb {

// Report a failed destroy verb ("ibv_destroy_qp failed: EBUSY (...)").
void report_release_failure(const char* verb, int err);

// Deleter for a destroy verb that returns 0 or an errno value.
template <typename T, int (*Destroy)(T*)>
struct Release {
    const char* verb;
    void operator()(T* p) const noexcept {
        if (int rc = Destroy(p); rc != 0) report_release_failure(verb, rc > 0 ? rc : errno);
    }
};

// Each handle names the verb that releases it.
#define WB_HANDLE(Name, Type, DestroyVerb)                                    \
    struct Name##Release : Release<Type, DestroyVerb> {                        \
        Name##Release() : Release<Type, DestroyVerb>{#DestroyVerb} {}           \
    };                                                                         \
    using Name = std::unique_ptr<Type, Name##Release>

WB_HANDLE(Context, ibv_context, ibv_close_device);
WB_HANDLE(ProtectionDomain, ibv_pd, ibv_dealloc_pd);
WB_HANDLE(MemoryRegion, ibv_mr, ibv_dereg_mr);
WB_HANDLE(CompletionChannel, ibv_comp_channel, ibv_destroy_comp_channel);
WB_HANDLE(CompletionQueue, ibv_cq, ibv_destroy_cq);
WB_HANDLE(QueuePair, ibv_qp, ibv_destroy_qp);
WB_HANDLE(AddressHandle, ibv_ah, ibv_destroy_ah);
WB_HANDLE(SharedReceiveQueue, ibv_srq, ibv_destroy_srq);  // lesson 13

// librdmacm: rdma_destroy_event_channel returns void, rdma_destroy_id
// returns -1 and sets errno (Release accepts both forms).
inline int destroy_event_channel(rdma_event_channel* ch) {
    rdma_destroy_event_channel(ch);
    return 0;
}
WB_HANDLE(EventChannel, rdma_event_channel, destroy_event_channel);
WB_HANDLE(CmId, rdma_cm_id, rdma_destroy_id);

#undef WB_HANDLE

// Lesson 14's memory window. ibv_dealloc_mw is a static inline function in
// verbs.h, which a template argument cannot name: handles.cpp wraps it.
int dealloc_mw(ibv_mw* mw);
struct MemoryWindowRelease : Release<ibv_mw, dealloc_mw> {
    MemoryWindowRelease() : Release<ibv_mw, dealloc_mw>{"ibv_dealloc_mw"} {}
};
using MemoryWindow = std::unique_ptr<ibv_mw, MemoryWindowRelease>;

// Lesson 15's extended CQ, released as the ibv_cq inside it: ibv_cq_ex_to_cq
// (a static inline function in verbs.h), then ibv_destroy_cq.
inline int destroy_cq_ex(ibv_cq_ex* cq) { return ibv_destroy_cq(ibv_cq_ex_to_cq(cq)); }
struct CompletionQueueExRelease : Release<ibv_cq_ex, destroy_cq_ex> {
    CompletionQueueExRelease() : Release<ibv_cq_ex, destroy_cq_ex>{"ibv_destroy_cq"} {}
};
using CompletionQueueEx = std::unique_ptr<ibv_cq_ex, CompletionQueueExRelease>;

// The QP that rdma_create_qp(id, ...) made on a CM id (id->qp). It is released
// with rdma_destroy_qp(id), so the deleter keeps the id:
//     wb::CmQueuePair qp{id->qp, {id.get()}};
struct CmQpRelease {
    rdma_cm_id* id = nullptr;
    void operator()(ibv_qp*) const noexcept { rdma_destroy_qp(id); }  // returns void: nothing to report
};
using CmQueuePair = std::unique_ptr<ibv_qp, CmQpRelease>;

// Memory for RDMA buffers: page-aligned, zeroed, freed with free().
struct FreeBuffer {
    void operator()(void* p) const noexcept;
};
using Buffer = std::unique_ptr<char[], FreeBuffer>;
// Allocate `bytes` of page-aligned zeroed memory; exits with a message on failure.
Buffer alloc_buffer(size_t bytes);

}  // namespace wb
