/*
 * UCP's client-server connection establishment (by socket address, through
 * a UCX connection manager) and one echoed stream message, for softroce's
 * middleware tests (crates/softroce-cli/tests/middleware.rs), which run it
 * with UCX_SOCKADDR_TLS_PRIORITY=rdmacm: the connection is made by rdma_cm.
 *
 * Usage: sockaddr_echo server ADDR       listens on ADDR, port from the
 *                                        kernel; prints "port N", echoes
 *                                        one message, prints "server ok"
 *        sockaddr_echo client ADDR PORT  sends a message, checks its echo,
 *                                        prints "client ok"
 * Exits 1 with a line on stderr on any failure, and gives up after 60 s.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#define MSG_LEN 4096

static void die(const char *what, ucs_status_t st)
{
	fprintf(stderr, "sockaddr_echo: %s: %s\n", what, ucs_status_string(st));
	exit(1);
}

static time_t deadline;

/* One progress round of `w`; past the deadline, gives up (the program polls
 * without sleeping and must not spin on when its peer is gone). */
static void progress(ucp_worker_h w, const char *waiting_for)
{
	ucp_worker_progress(w);
	if (time(NULL) > deadline) {
		fprintf(stderr, "sockaddr_echo: no %s within 60 s\n", waiting_for);
		exit(1);
	}
}

/* Progresses `w` until request `r` (NULL: done at once) completes. */
static void wait_req(ucp_worker_h w, void *r, const char *what)
{
	ucs_status_t st;

	if (r == NULL)
		return;
	if (UCS_PTR_IS_ERR(r))
		die(what, UCS_PTR_STATUS(r));
	while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS)
		progress(w, what);
	ucp_request_free(r);
	if (st != UCS_OK)
		die(what, st);
}

static void recv_all(ucp_worker_h w, ucp_ep_h ep, char *buf)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_STREAM_RECV_FLAG_WAITALL };
	size_t len = 0;

	wait_req(w, ucp_stream_recv_nbx(ep, buf, MSG_LEN, &len, &p), "ucp_stream_recv_nbx");
}

static void send_all(ucp_worker_h w, ucp_ep_h ep, const char *buf)
{
	ucp_request_param_t p = { .op_attr_mask = 0 };

	wait_req(w, ucp_stream_send_nbx(ep, buf, MSG_LEN, &p), "ucp_stream_send_nbx");
}

static void close_ep(ucp_worker_h w, ucp_ep_h ep)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
	void *r = ucp_ep_close_nbx(ep, &p);

	if (r != NULL && !UCS_PTR_IS_ERR(r)) {
		while (ucp_request_check_status(r) == UCS_INPROGRESS)
			progress(w, "endpoint close");
		ucp_request_free(r);
	}
}

static ucp_conn_request_h pending;

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
	(void)arg;
	pending = req;
}

int main(int argc, char **argv)
{
	ucp_params_t params = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_STREAM };
	ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
				   .thread_mode = UCS_THREAD_MODE_SINGLE };
	struct sockaddr_in sa = { .sin_family = AF_INET };
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_ep_h ep;
	ucs_status_t st;
	char out[MSG_LEN], in[MSG_LEN];
	int i, server;

	if (argc < 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")) ||
	    inet_pton(AF_INET, argv[2], &sa.sin_addr) != 1) {
		fprintf(stderr, "usage: sockaddr_echo server ADDR | client ADDR PORT\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	deadline = time(NULL) + 60;
	if (!server) {
		if (argc < 4)
			return 2;
		sa.sin_port = htons((uint16_t)atoi(argv[3]));
	}
	if ((st = ucp_init(&params, NULL, &ctx)) != UCS_OK)
		die("ucp_init", st);
	if ((st = ucp_worker_create(ctx, &wp, &w)) != UCS_OK)
		die("ucp_worker_create", st);
	for (i = 0; i < MSG_LEN; i++)
		out[i] = (char)(i * 7 + 3);

	if (server) {
		ucp_listener_params_t lp = {
			.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
			.sockaddr = { (struct sockaddr *)&sa, sizeof(sa) },
			.conn_handler = { on_conn_request, NULL },
		};
		ucp_listener_attr_t la = { .field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR };
		ucp_listener_h l;

		if ((st = ucp_listener_create(w, &lp, &l)) != UCS_OK)
			die("ucp_listener_create", st);
		if ((st = ucp_listener_query(l, &la)) != UCS_OK)
			die("ucp_listener_query", st);
		printf("port %u\n", ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port));
		fflush(stdout);
		while (pending == NULL)
			progress(w, "connection request");
		ucp_ep_params_t ep_p = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST, .conn_request = pending };
		if ((st = ucp_ep_create(w, &ep_p, &ep)) != UCS_OK)
			die("ucp_ep_create (server)", st);
		recv_all(w, ep, in);
		send_all(w, ep, in);
		/* The client closes after it has the echo. */
		for (i = 0; i < 200000; i++)
			ucp_worker_progress(w);
		close_ep(w, ep);
		ucp_listener_destroy(l);
		printf("server ok\n");
	} else {
		ucp_ep_params_t ep_p = {
			.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
			.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
			.sockaddr = { (struct sockaddr *)&sa, sizeof(sa) },
		};

		if ((st = ucp_ep_create(w, &ep_p, &ep)) != UCS_OK)
			die("ucp_ep_create (client)", st);
		send_all(w, ep, out);
		recv_all(w, ep, in);
		if (memcmp(in, out, MSG_LEN)) {
			fprintf(stderr, "sockaddr_echo: the echo differs\n");
			return 1;
		}
		close_ep(w, ep);
		printf("client ok\n");
	}
	ucp_worker_destroy(w);
	ucp_cleanup(ctx);
	return 0;
}
