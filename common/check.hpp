// check.hpp - check every verb on the line after it is called.
//
// Each rdma-core call reports failure in one of a few ways. One macro per
// convention turns the call's own source text into the message, so the
// message can never name the wrong verb:
//
//   CHECK_PTR(call)    NULL on failure, errno set      ibv_open_device, ibv_alloc_pd,
//                                                      ibv_reg_mr, ibv_create_cq/qp ...
//   CHECK_RC(call)     returns 0, or an errno value    ibv_modify_qp, ibv_query_port,
//                                                      ibv_post_send/recv, ibv_req_notify_cq,
//                                                      ibv_dealloc_pd ...
//   CHECK_ERRNO(call)  returns -1 on failure, errno    poll, ibv_get_cq_event, rdma_create_id,
//                      set (rdma_cm uses this too)     rdma_get_cm_event ...
//   CHECK_POLL(call)   a count >= 0, or negative       ibv_poll_cq (no errno: the message
//                                                      says what it returned)
//   CHECK_NEG_ERRNO(call)  a count >= 0, or a negative ibv_query_gid_table
//                      errno value (errno is not set)
//
// On failure they print, on stderr,
//   lesson4: ibv_reg_mr(pd.get(), buf, len, access) failed: ENOMEM (Cannot allocate memory)
//   lesson4: check: ulimit -l ...                (only when a hint is given)
// and exit with status 1. Each macro takes an optional hint: what to check.
// The kernel releases every RDMA resource of a process that exits, so exiting
// from the middle of a lesson is safe.
//
// Shortcut (see common/README.md): we exit instead of throwing; a workbook
// program has nothing to recover.
#pragma once

#include <cerrno>
#include <cstddef>
#include <string>

namespace wb {

// The program name used as the prefix of every message ("lesson4").
void set_program_name(const char* argv0);
const char* program_name();

// "EINVAL (Invalid argument)": the errno name and its text.
std::string errno_str(int err);

// Print "PROGRAM: what" (and "PROGRAM: check: hint" when hint is non-empty)
// on stderr and exit(1). Use for runtime failures that are not a verb's.
[[noreturn]] void fail(const std::string& what, const std::string& hint = "");

// End with an error outcome the lesson itself decided (an overflowing sum, a
// message that does not fit): print "result: error: what" on stdout, the
// lesson's last line, and exit(1).
[[noreturn]] void result_error(const std::string& what);

// `len` bytes of peer-supplied text as it may appear between quotes on one
// line: printable ASCII (0x20..0x7e) as it is, quotes and backslashes with a
// backslash, every other byte as \xNN (controls, DEL, and all bytes from 0x80:
// a UTF-8 C1 control such as CSI c2 9b, a raw 9b, a right-to-left override
// e2 80 ae). A peer that sends binary cannot garble the terminal, reorder
// what it shows, or break a "result:" line.
std::string printable(const char* data, size_t len);

// Implementation of the macros below; call the macros, not these.
[[noreturn]] void fail_call(const char* call, int err, const char* hint);
[[noreturn]] void fail_poll(const char* call, int n, const char* hint);

template <typename T>
T* check_ptr(T* p, const char* call, const char* hint) {
    if (p == nullptr) fail_call(call, errno, hint);
    return p;
}

inline void check_rc(int rc, const char* call, const char* hint) {
    // Some providers return -1 and set errno instead of returning the errno
    // value, so accept both.
    if (rc != 0) fail_call(call, rc > 0 ? rc : errno, hint);
}

template <typename T>
T check_errno(T rc, const char* call, const char* hint) {
    if (rc == -1) fail_call(call, errno, hint);
    return rc;
}

// A count >= 0, or minus an errno value (-EINVAL); errno itself may be stale.
template <typename T>
T check_neg_errno(T rc, const char* call, const char* hint) {
    if (rc < 0) fail_call(call, static_cast<int>(-rc), hint);
    return rc;
}

// ibv_poll_cq returns how many completions it took, or a negative number
// when the CQ itself failed (an overrun, a device error); it sets no errno.
inline int check_poll(int n, const char* call, const char* hint) {
    if (n < 0) fail_poll(call, n, hint);
    return n;
}

}  // namespace wb

// The optional second argument is a hint: what the learner should check.
#define CHECK_PTR(call, ...) ::wb::check_ptr((call), #call, WB_HINT_STR(__VA_ARGS__))
#define CHECK_RC(call, ...) ::wb::check_rc((call), #call, WB_HINT_STR(__VA_ARGS__))
#define CHECK_ERRNO(call, ...) ::wb::check_errno((call), #call, WB_HINT_STR(__VA_ARGS__))
#define CHECK_POLL(call, ...) ::wb::check_poll((call), #call, WB_HINT_STR(__VA_ARGS__))
#define CHECK_NEG_ERRNO(call, ...) ::wb::check_neg_errno((call), #call, WB_HINT_STR(__VA_ARGS__))
// An empty hint when none is given, else the given one.
#define WB_HINT_STR(...) WB_HINT_STR_I(__VA_OPT__(__VA_ARGS__, ) "")
#define WB_HINT_STR_I(first, ...) first
