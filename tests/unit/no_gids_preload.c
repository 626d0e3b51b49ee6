/* no_gids_preload.c - an LD_PRELOAD shim that makes every GID table look
 * empty, as on a RoCE port whose netdev has no address at all.
 *
 * rxe always adds a link-local fe80:: GID from the netdev's MAC, even with
 * IPv6 disabled and the netdev down (tried in the lab), so a real rxe port
 * never shows lesson 1's "no usable RoCE GID". tests/lesson1_device_query.bats
 * builds this shim at run time (it is not a program, so `make units` leaves
 * it alone) and runs lesson 1 under it:
 *
 *   cc -shared -fPIC -o no_gids.so tests/unit/no_gids_preload.c
 *   LD_PRELOAD=./no_gids.so ./lesson1
 *
 * ibv_query_gid_table() is an inline wrapper around _ibv_query_gid_table(),
 * the symbol libibverbs exports; this one reports zero valid entries.
 */
#include <infiniband/verbs.h>

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries,
                             uint32_t flags, size_t entry_size) {
    (void)context, (void)entries, (void)max_entries, (void)flags, (void)entry_size;
    return 0;
}
