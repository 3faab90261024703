/*
 * A daemon's signal pattern over softroce (issue 31): with a device open
 * and an rdma_cm id listening (so softroce's driver and CM threads run),
 * the program blocks SIGUSR2, reads it from a signalfd and signals itself.
 * The kernel delivers a process-directed signal to any thread that does
 * not block it: every thread softroce starts must block all signals, or
 * the signal kills the process there instead of reaching the signalfd.
 */
#include "common.h"

#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/signalfd.h>

static struct dev d;

int main(void)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct signalfd_siginfo si;
	struct pollfd p;
	sigset_t set;
	int fd, i, got = 0;

	watchdog(60);
	open_dev(&d);
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL, "rdma_create_event_channel: errno %d", errno);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: errno %d", errno);
	memcpy(&sin.sin_addr, &d.gid.raw[12], 4);
	REQUIRE(rdma_bind_addr(id, (struct sockaddr *)&sin) == 0, "rdma_bind_addr: errno %d", errno);
	REQUIRE(rdma_listen(id, 1) == 0, "rdma_listen: errno %d", errno);

	begin("signalfd_reads_a_signal_the_process_sent_itself");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	REQUIRE(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0, "pthread_sigmask");
	fd = signalfd(-1, &set, SFD_CLOEXEC);
	REQUIRE(fd >= 0, "signalfd: errno %d", errno);
	for (i = 0; i < 50; i++) {
		REQUIRE(kill(getpid(), SIGUSR2) == 0, "kill: errno %d", errno);
		p = (struct pollfd){ fd, POLLIN, 0 };
		if (poll(&p, 1, 5000) != 1)
			break;
		REQUIRE(read(fd, &si, sizeof(si)) == sizeof(si), "read signalfd: errno %d", errno);
		if (si.ssi_signo == SIGUSR2 && si.ssi_pid == (uint32_t)getpid())
			got++;
		sleep_ms(2);
	}
	EXPECT(got == 50, "%d of 50 signals read from the signalfd", got);
	end();

	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	ibv_dealloc_pd(d.pd);
	ibv_close_device(d.ctx);
	return finish();
}
