/*
 * fork(): a process with an open device and an active RC connection forks;
 * the child lists the devices and exits 0 (it must neither hang nor
 * crash), and the parent's connection keeps working.
 */
#include "common.h"

#include <sys/wait.h>

#define LEN 4096

static struct dev d;
static struct ibv_cq *cq;
static struct ibv_qp *qa, *qb;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

/* A SEND from A to B; returns whether both ends completed it. */
static int ping(uint64_t id, uint32_t len)
{
	struct ibv_wc wc[2];
	int n, ok = 1, i;

	fill(abuf, len, (unsigned)id);
	post_recv1(qb, id, bmr, bbuf, LEN);
	if (post_send1(qa, id + 1000, amr, abuf, len, 0) != 0)
		return 0;
	n = poll_n(cq, 2, wc, 3000);
	if (n != 2)
		return 0;
	for (i = 0; i < 2; i++)
		ok &= wc[i].status == IBV_WC_SUCCESS;
	return ok && memcmp(abuf, bbuf, len) == 0;
}

/* Forks; the child runs `child` and exits with its result; the parent
 * waits up to 10 s and returns the child's wait status (or -1). */
static int fork_and_wait(int (*child)(void))
{
	long long deadline;
	pid_t pid, w;
	int status = 0;

	fflush(stdout);
	pid = fork();
	REQUIRE(pid >= 0, "fork: errno %d", errno);
	if (pid == 0) {
		alarm(10);
		exit(child());
	}
	deadline = now_ms() + 10000;
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline)
		sleep_ms(5);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		return -1;
	}
	return status;
}

static int child_lists_devices(void)
{
	struct ibv_device **list;
	int n = -1;

	list = ibv_get_device_list(&n);
	if (!list || n != 1 || strcmp(ibv_get_device_name(list[0]), "softroce_lo") != 0)
		return 2;
	ibv_free_device_list(list);
	return 0;
}

static int child_does_nothing(void)
{
	return 0;
}

/* The child tears down everything it inherited, as a program that exits
 * cleanly (or a Python child's garbage collection) would. */
static int child_tears_down(void)
{
	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb))
		return 3;
	if (ibv_dereg_mr(amr) || ibv_dereg_mr(bmr))
		return 4;
	if (ibv_destroy_cq(cq))
		return 5;
	if (ibv_dealloc_pd(d.pd))
		return 6;
	if (ibv_close_device(d.ctx))
		return 7;
	return 0;
}

int main(void)
{
	int status;

	watchdog(30);
	open_dev(&d);
	cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq, "ibv_create_cq: errno %d", errno);
	abuf = alloc_buf(LEN);
	bbuf = alloc_buf(LEN);
	amr = ibv_reg_mr(d.pd, abuf, LEN, ALL_ACCESS);
	bmr = ibv_reg_mr(d.pd, bbuf, LEN, ALL_ACCESS);
	REQUIRE(amr && bmr, "ibv_reg_mr: errno %d", errno);
	qa = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	qb = make_qp(&d, IBV_QPT_RC, cq, cq, NULL, 0);
	connect_pair(&d, qa, qb);

	begin("before_fork");
	EXPECT(ping(1, 100), "a SEND before the fork failed");
	end();

	begin("fork_child_lists_devices");
	status = fork_and_wait(child_lists_devices);
	EXPECT(status != -1, "the child hung (killed after 10 s)");
	EXPECT(status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
	       "the child ended with status %#x (exit %d, signal %d)", status,
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	end();

	begin("parent_works_after_fork");
	EXPECT(ping(2, 1000), "a SEND after the fork failed");
	EXPECT(ping(3, 4000), "a second SEND after the fork failed");
	end();

	begin("fork_while_busy");
	/* Fork with traffic in flight (a WRITE and a SEND posted, not polled). */
	{
		struct ibv_sge sge = { (uintptr_t)abuf, 2048, amr->lkey };
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc[3];
		int n;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 77;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = (uintptr_t)bbuf;
		wr.wr.rdma.rkey = bmr->rkey;
		post_recv1(qb, 78, bmr, bbuf + 2048, 2048);
		REQUIRE(ibv_post_send(qa, &wr, &bad) == 0, "ibv_post_send");
		REQUIRE(post_send1(qa, 79, amr, abuf, 16, 0) == 0, "ibv_post_send");
		status = fork_and_wait(child_does_nothing);
		EXPECT(status == 0, "the child ended with status %#x", status);
		n = poll_n(cq, 3, wc, 3000);
		EXPECT(n == 3, "%d of 3 completions after the fork", n);
	}
	EXPECT(ping(4, 10), "a SEND after the second fork failed");
	end();

	begin("fork_child_tears_down");
	status = fork_and_wait(child_tears_down);
	EXPECT(status != -1, "the child hung (killed after 10 s)");
	EXPECT(status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
	       "the child ended with status %#x (exit %d, signal %d)", status,
	       WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	EXPECT(ping(5, 3000), "the parent's SEND after the child's teardown failed");
	end();

	REQUIRE(ibv_destroy_qp(qa) == 0 && ibv_destroy_qp(qb) == 0, "ibv_destroy_qp");
	REQUIRE(ibv_dereg_mr(amr) == 0 && ibv_dereg_mr(bmr) == 0, "ibv_dereg_mr");
	REQUIRE(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	REQUIRE(ibv_dealloc_pd(d.pd) == 0, "ibv_dealloc_pd");
	REQUIRE(ibv_close_device(d.ctx) == 0, "ibv_close_device");
	return finish();
}
