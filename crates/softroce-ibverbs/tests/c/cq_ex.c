/*
 * The extended CQ: ibv_create_cq_ex with IBV_WC_EX_WITH_* fields, polled
 * with ibv_start_poll / ibv_next_poll / ibv_end_poll and read with the
 * ibv_wc_read_* readers (all reached through the ibv_cq_ex pointers).
 */
#include "common.h"

#define LEN 8192
#define WC_FLAGS                                                                                               \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |         \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static struct dev d;

static struct ibv_cq_ex *make_cq_ex(int cqe, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.cqe = (uint32_t)cqe;
	a.wc_flags = wc_flags;
	return ibv_create_cq_ex(d.ctx, &a);
}

int main(void)
{
	struct ibv_cq_ex *scq, *rcq, *bad;
	struct ibv_qp *qa, *qb;
	struct ibv_qp_ex *xa;
	struct ibv_poll_cq_attr attr = { 0 };
	struct ibv_mr *amr, *bmr;
	uint8_t *abuf, *bbuf;
	uint64_t ids[64];
	int i, n, r;

	watchdog(30);
	open_dev(&d);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);

	begin("cq_ex_create");
	scq = make_cq_ex(128, WC_FLAGS);
	rcq = make_cq_ex(128, WC_FLAGS);
	REQUIRE(scq && rcq, "ibv_create_cq_ex: errno %d", errno);
	EXPECT(ibv_cq_ex_to_cq(scq)->context == d.ctx, "cq->context is not the device's");
	EXPECT(ibv_cq_ex_to_cq(scq)->cqe >= 128, "cqe %d", ibv_cq_ex_to_cq(scq)->cqe);
	/* Tag matching fields: not supported (as in rxe). */
	errno = 0;
	bad = make_cq_ex(16, WC_FLAGS | IBV_WC_EX_WITH_TM_INFO);
	EXPECT(bad == NULL && errno == EOPNOTSUPP, "unsupported wc_flags: %p, errno %d", (void *)bad, errno);
	end();

	qa = make_qp(&d, IBV_QPT_RC, ibv_cq_ex_to_cq(scq), ibv_cq_ex_to_cq(rcq), NULL,
		     IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
			     IBV_QP_EX_WITH_RDMA_READ);
	qb = make_qp(&d, IBV_QPT_RC, ibv_cq_ex_to_cq(scq), ibv_cq_ex_to_cq(rcq), NULL, 0);
	xa = ibv_qp_to_qp_ex(qa);
	REQUIRE(xa, "ibv_qp_to_qp_ex");
	connect_pair(&d, qa, qb);

	begin("start_poll_empty");
	r = ibv_start_poll(rcq, &attr);
	EXPECT(r == ENOENT, "ibv_start_poll on an empty CQ: %d, expected ENOENT", r);
	end();

	/* Three SENDs with immediate data to B. */
	fill(abuf, 300, 1);
	for (i = 0; i < 3; i++)
		post_recv1(qb, 10 + i, bmr, bbuf + 256 * i, 256);
	ibv_wr_start(xa);
	for (i = 0; i < 3; i++) {
		xa->wr_id = 100 + i;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send_imm(xa, htonl(0x100 + i));
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 10 * i), 10 + i);
	}
	r = ibv_wr_complete(xa);
	REQUIRE(r == 0, "ibv_wr_complete: %d", r);

	begin("poll_ex_readers");
	/* Let all three arrive, then take only the first. */
	sleep_ms(50);
	r = start_poll_wait(rcq, 3000);
	EXPECT(r == 0, "ibv_start_poll: %d", r);
	if (r == 0) {
		EXPECT(rcq->status == IBV_WC_SUCCESS, "status %d", rcq->status);
		EXPECT(rcq->wr_id == 10, "wr_id %" PRIu64, (uint64_t)rcq->wr_id);
		EXPECT(ibv_wc_read_opcode(rcq) == IBV_WC_RECV, "opcode %d", ibv_wc_read_opcode(rcq));
		EXPECT(ibv_wc_read_byte_len(rcq) == 10, "byte_len %u", ibv_wc_read_byte_len(rcq));
		EXPECT(ibv_wc_read_wc_flags(rcq) & IBV_WC_WITH_IMM, "wc_flags %#x", ibv_wc_read_wc_flags(rcq));
		EXPECT(ibv_wc_read_imm_data(rcq) == htonl(0x100), "imm_data %#x (network order expected)",
		       ibv_wc_read_imm_data(rcq));
		EXPECT(ibv_wc_read_qp_num(rcq) == qb->qp_num, "qp_num %u", ibv_wc_read_qp_num(rcq));
		EXPECT(ibv_wc_read_src_qp(rcq) == qa->qp_num, "src_qp %u, expected %u", ibv_wc_read_src_qp(rcq),
		       qa->qp_num);
		EXPECT(ibv_wc_read_sl(rcq) == 0, "sl %u", ibv_wc_read_sl(rcq));
		EXPECT(ibv_wc_read_dlid_path_bits(rcq) == 0, "dlid_path_bits %u", ibv_wc_read_dlid_path_bits(rcq));
		(void)ibv_wc_read_slid(rcq);
		(void)ibv_wc_read_vendor_err(rcq);
		ibv_end_poll(rcq);
	}
	EXPECT(memcmp(bbuf, abuf, 10) == 0, "payload differs");
	end();

	begin("poll_ex_resume");
	/* The two left are found by the next start_poll, in order. */
	r = start_poll_wait(rcq, 3000);
	EXPECT(r == 0, "ibv_start_poll: %d", r);
	if (r == 0) {
		EXPECT(rcq->wr_id == 11 && ibv_wc_read_byte_len(rcq) == 11 &&
			       ibv_wc_read_imm_data(rcq) == htonl(0x101),
		       "second: wr_id %" PRIu64 " byte_len %u", (uint64_t)rcq->wr_id, ibv_wc_read_byte_len(rcq));
		r = ibv_next_poll(rcq);
		EXPECT(r == 0, "ibv_next_poll: %d", r);
		if (r == 0)
			EXPECT(rcq->wr_id == 12 && ibv_wc_read_byte_len(rcq) == 12 &&
				       ibv_wc_read_imm_data(rcq) == htonl(0x102) && rcq->status == IBV_WC_SUCCESS,
			       "third: wr_id %" PRIu64 " byte_len %u", (uint64_t)rcq->wr_id,
			       ibv_wc_read_byte_len(rcq));
		r = ibv_next_poll(rcq);
		EXPECT(r == ENOENT, "ibv_next_poll past the end: %d, expected ENOENT", r);
		ibv_end_poll(rcq);
	}
	r = ibv_start_poll(rcq, &attr);
	EXPECT(r == ENOENT, "ibv_start_poll on the drained CQ: %d", r);
	if (r == 0)
		ibv_end_poll(rcq);
	end();

	begin("poll_ex_send_side");
	n = 0;
	while (n < 3) {
		r = start_poll_wait(scq, 3000);
		if (r) {
			EXPECT(0, "ibv_start_poll: %d after %d completions", r, n);
			break;
		}
		do {
			EXPECT(scq->status == IBV_WC_SUCCESS, "status %d", scq->status);
			EXPECT(ibv_wc_read_opcode(scq) == IBV_WC_SEND, "opcode %d", ibv_wc_read_opcode(scq));
			EXPECT(ibv_wc_read_qp_num(scq) == qa->qp_num, "qp_num %u", ibv_wc_read_qp_num(scq));
			ids[n++] = scq->wr_id;
		} while (n < 3 && ibv_next_poll(scq) == 0);
		ibv_end_poll(scq);
	}
	EXPECT(n == 3 && ids[0] == 100 && ids[1] == 101 && ids[2] == 102, "%d send completions", n);
	end();

	begin("poll_ex_many");
	/* 40 completions (more than one internal batch), taken in runs of
	 * 7 across start/end_poll pairs: none lost, none repeated, in order. */
	ibv_wr_start(xa);
	for (i = 0; i < 40; i++) {
		xa->wr_id = 1000 + i;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(xa, bmr->rkey, (uintptr_t)(bbuf + 4096 + 8 * i));
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 8 * i), 8);
	}
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	sleep_ms(20);
	n = 0;
	while (n < 40) {
		int run = 0;

		r = start_poll_wait(scq, 3000);
		if (r) {
			EXPECT(0, "ibv_start_poll: %d after %d completions", r, n);
			break;
		}
		do {
			EXPECT(scq->status == IBV_WC_SUCCESS, "status %d", scq->status);
			EXPECT(ibv_wc_read_opcode(scq) == IBV_WC_RDMA_WRITE, "opcode %d", ibv_wc_read_opcode(scq));
			ids[n < 64 ? n : 63] = scq->wr_id;
			n++;
			run++;
		} while (run < 7 && (r = ibv_next_poll(scq)) == 0);
		ibv_end_poll(scq);
	}
	for (i = 0; i < 40 && i < n; i++)
		EXPECT(ids[i] == (uint64_t)(1000 + i), "completion %d has wr_id %" PRIu64, i, ids[i]);
	r = ibv_start_poll(scq, &attr);
	EXPECT(r == ENOENT, "a 41st completion: %d", r);
	if (r == 0)
		ibv_end_poll(scq);
	EXPECT(memcmp(bbuf + 4096, abuf, 320) == 0, "written bytes differ");
	end();

	begin("poll_cq_on_cq_ex");
	/* ibv_poll_cq works on an extended CQ too. */
	{
		struct ibv_wc wc;

		ibv_wr_start(xa);
		xa->wr_id = 77;
		xa->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_read(xa, bmr->rkey, (uintptr_t)bbuf);
		ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)(abuf + 6000), 33);
		r = ibv_wr_complete(xa);
		EXPECT(r == 0, "ibv_wr_complete: %d", r);
		n = poll_n(ibv_cq_ex_to_cq(scq), 1, &wc, 3000);
		EXPECT(n == 1, "ibv_poll_cq: %d", n);
		if (n == 1) {
			EXPECT_WC(wc, 77, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
			EXPECT(wc.byte_len == 33, "byte_len %u", wc.byte_len);
		}
	}
	end();

	begin("poll_cq_after_early_stop");
	/* Completions a start_poll run left behind are next for ibv_poll_cq
	 * too: the two interfaces read one queue. */
	{
		struct ibv_wc wc[4];

		for (i = 0; i < 3; i++)
			post_recv1(qb, 20 + i, bmr, bbuf + 256 * i, 256);
		ibv_wr_start(xa);
		for (i = 0; i < 3; i++) {
			xa->wr_id = 200 + i;
			xa->wr_flags = 0;
			ibv_wr_send(xa);
			ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 20 + i);
		}
		r = ibv_wr_complete(xa);
		EXPECT(r == 0, "ibv_wr_complete: %d", r);
		sleep_ms(50);
		r = start_poll_wait(rcq, 3000);
		EXPECT(r == 0, "ibv_start_poll: %d", r);
		if (r == 0) {
			EXPECT(rcq->wr_id == 20, "first: wr_id %" PRIu64, (uint64_t)rcq->wr_id);
			ibv_end_poll(rcq);
		}
		n = poll_n(ibv_cq_ex_to_cq(rcq), 2, wc, 3000);
		EXPECT(n == 2, "ibv_poll_cq found %d of the 2 left", n);
		if (n == 2) {
			EXPECT(wc[0].wr_id == 21 && wc[0].byte_len == 21, "second: wr_id %" PRIu64 " byte_len %u",
			       (uint64_t)wc[0].wr_id, wc[0].byte_len);
			EXPECT(wc[1].wr_id == 22 && wc[1].byte_len == 22, "third: wr_id %" PRIu64 " byte_len %u",
			       (uint64_t)wc[1].wr_id, wc[1].byte_len);
		}
		r = ibv_start_poll(rcq, &attr);
		EXPECT(r == ENOENT, "ibv_start_poll after ibv_poll_cq drained the CQ: %d", r);
		if (r == 0) {
			EXPECT(0, "start_poll found wr_id %" PRIu64 " again", (uint64_t)rcq->wr_id);
			ibv_end_poll(rcq);
		}
	}
	end();

	begin("poll_ex_error_status");
	/* A failed completion: status set, wr_id valid. */
	ibv_wr_start(xa);
	xa->wr_id = 88;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(xa, bmr->rkey ^ 0x4400, (uintptr_t)bbuf);
	ibv_wr_set_sge(xa, amr->lkey, (uintptr_t)abuf, 8);
	r = ibv_wr_complete(xa);
	EXPECT(r == 0, "ibv_wr_complete: %d", r);
	r = start_poll_wait(scq, 3000);
	EXPECT(r == 0, "ibv_start_poll: %d", r);
	if (r == 0) {
		EXPECT(scq->wr_id == 88, "wr_id %" PRIu64, (uint64_t)scq->wr_id);
		EXPECT(scq->status == IBV_WC_REM_ACCESS_ERR, "status %s", ibv_wc_status_str(scq->status));
		ibv_end_poll(scq);
	}
	end();

	REQUIRE(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
