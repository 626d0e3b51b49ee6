// ex1_2.cpp - exercise 1.2: walk the GID table slot by slot with ibv_query_gid_ex.
//
// Lesson 1 reads every valid GID at once with ibv_query_gid_table. Its
// sibling ibv_query_gid_ex reads one slot by index, and answers ENODATA for
// an empty one. Walk all gid_tbl_len slots of the port: print each used slot
// as "gid[INDEX] ADDRESS TYPE" and count the empty ones. The task is in
// README.md beside this file; `make grade EX=1.2` checks the result against
// the kernel's own view of the table (/sys/class/infiniband/DEV/ports/PORT/gids).
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>

#include "check.hpp"
#include "device.hpp"
#include "handles.hpp"
#include "options.hpp"

int main(int argc, char** argv) {
    const wb::Usage usage = {
        .synopsis = "[-d DEV] [-i PORT]",
        .summary = "exercise 1.2: every slot of the port's GID table, by ibv_query_gid_ex",
        .network = false,
    };
    const wb::Options opt = wb::parse_options(argc, argv, usage);

    wb::Context ctx = wb::open_device(opt.device);
    ibv_port_attr port{};
    CHECK_RC(ibv_query_port(ctx.get(), opt.ib_port, &port));
    std::printf("device: %s port %d, gid_tbl_len %d\n", ibv_get_device_name(ctx->device), opt.ib_port,
                port.gid_tbl_len);

    [[maybe_unused]] int used = 0, empty = 0;
    // TODO(1.2): for every index 0 .. gid_tbl_len-1, call
    //     ibv_query_gid_ex(ctx.get(), opt.ib_port, index, &entry, 0)
    // It returns 0 and fills an ibv_gid_entry for a used slot: print
    //     gid[INDEX] ADDRESS TYPE        (wb::gid_to_string, wb::gid_type_str)
    // It returns ENODATA for an empty slot: count it. Any other value is an
    // error: report it (CHECK_RC does). Then print
    //     slots: USED used, EMPTY empty (ENODATA)

    return 0;
}
