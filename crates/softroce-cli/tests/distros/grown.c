/* Built against whichever rdma-core's headers the compiler finds (44 on
 * Debian 12, 56.1 on 13, 65.0 on sid) and run over softroce's
 * libibverbs.so.1: the structs and verbs those headers grew. Prints one
 * "ok ..." line per check, or "FAIL ..." and exits 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

/* The rdma-core release of the headers (-DRDMA_CORE=56); 44 if not told. */
#ifndef RDMA_CORE
#define RDMA_CORE 44
#endif

static int failed;
#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (cond) {                                                  \
			printf("ok ");                                       \
		} else {                                                     \
			printf("FAIL ");                                     \
			failed = 1;                                          \
		}                                                            \
		printf(__VA_ARGS__);                                         \
		printf("\n");                                                \
	} while (0)

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		printf("FAIL no device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL, "open %s", ibv_get_device_name(list[0]));
	if (!ctx)
		return 1;

	/* The header's ibv_query_port passes sizeof(struct ibv_port_attr):
	 * 52 bytes for 44, 56 since 45 with active_speed_ex. */
	struct ibv_port_attr pa;
	memset(&pa, 0xa5, sizeof(pa));
	CHECK(ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE, "query_port size %zu",
	      sizeof(pa));
#if RDMA_CORE >= 56
	CHECK(pa.active_speed_ex == pa.active_speed, "active_speed_ex %u", pa.active_speed_ex);
#endif
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "alloc_pd");

#if RDMA_CORE >= 65
	uint64_t speed = 0;
	CHECK(ibv_query_port_speed(ctx, 1, &speed) == EOPNOTSUPP, "query_port_speed EOPNOTSUPP as rxe");

	struct ibv_comp_cntr_caps caps;
	memset(&caps, 0xff, sizeof(caps));
	CHECK(ibv_query_comp_cntr_caps(ctx, &caps) == EOPNOTSUPP && caps.max_counters == 0 && caps.max_value == 0,
	      "comp_cntr caps zeroed, EOPNOTSUPP");
	struct ibv_comp_cntr_init_attr cca = {0};
	errno = 0;
	CHECK(ibv_create_comp_cntr(ctx, &cca) == NULL && errno == EOPNOTSUPP, "create_comp_cntr EOPNOTSUPP");
	errno = 0;
	CHECK(ibv_alloc_dmah(ctx, &(struct ibv_dmah_init_attr){0}) == NULL && errno == EOPNOTSUPP,
	      "alloc_dmah EOPNOTSUPP");

	struct ibv_buf *buf = NULL;
	char *mem = ibv_alloc_buf(pd, 1 << 16, &buf);
	CHECK(mem && buf && ((unsigned long)mem & 4095) == 0, "alloc_buf page-aligned");
	memset(mem, 7, 1 << 16);
	struct ibv_mr *mr = ibv_reg_buf_mr(pd, buf, mem + 4096, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr && mr->addr == mem + 4096 && mr->length == 8192 && mr->pd == pd, "reg_buf_mr inside the buffer");
	errno = 0;
	CHECK(ibv_reg_buf_mr(pd, buf, mem + 4096, 1 << 16, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL,
	      "reg_buf_mr past the buffer EINVAL");
	errno = 0;
	CHECK(ibv_export_buf_dmabuf_fd(buf) == -1 && errno == ENODATA, "export_buf_dmabuf_fd ENODATA");
	struct ibv_mr_init_attr mia = {
		.length = 4096, .access = IBV_ACCESS_LOCAL_WRITE, .comp_mask = IBV_REG_MR_MASK_ADDR, .addr = mem,
	};
	struct ibv_mr *mr2 = ibv_reg_mr_ex(pd, &mia);
	CHECK(mr2 && mr2->addr == mem && mr2->lkey != mr->lkey, "reg_mr_ex by address");
	mia.comp_mask = IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_DMAH;
	errno = 0;
	CHECK(ibv_reg_mr_ex(pd, &mia) == NULL && errno == EOPNOTSUPP, "reg_mr_ex with a DMA handle EOPNOTSUPP");
	mia.comp_mask = 0;
	errno = 0;
	CHECK(ibv_reg_mr_ex(pd, &mia) == NULL && errno == EINVAL, "reg_mr_ex without an address EINVAL");
	CHECK(ibv_dereg_mr(mr2) == 0 && ibv_dereg_mr(mr) == 0, "dereg_mr");
	ibv_free_buf(buf);
#endif
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	ibv_free_device_list(list);
	return failed;
}
