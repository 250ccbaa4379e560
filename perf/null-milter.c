/* smx-null-milter: a milter on sendmail's libmilter that continues at every
 * stage, the cost of the milter protocol alone for relay-bench's milter axis
 * and a filter for the tests. Every callback is registered, so that the MTA
 * sends every stage (libmilter tells it to skip the stages a filter has no
 * callback for).
 *   smx-null-milter -p inet:PORT@127.0.0.1 [-a "Name: value"]
 * -a: add that header field to every message at its end (an edit to check). */
#include <libmilter/mfapi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *header_name;
static char *header_value;

static sfsistat on_connect(SMFICTX *ctx, char *host, _SOCK_ADDR *addr)
{
	(void)ctx, (void)host, (void)addr;
	return SMFIS_CONTINUE;
}

static sfsistat on_helo(SMFICTX *ctx, char *helo)
{
	(void)ctx, (void)helo;
	return SMFIS_CONTINUE;
}

static sfsistat on_envelope(SMFICTX *ctx, char **argv)
{
	(void)ctx, (void)argv;
	return SMFIS_CONTINUE;
}

static sfsistat on_header(SMFICTX *ctx, char *name, char *value)
{
	(void)ctx, (void)name, (void)value;
	return SMFIS_CONTINUE;
}

static sfsistat on_stage(SMFICTX *ctx)
{
	(void)ctx;
	return SMFIS_CONTINUE;
}

static sfsistat on_body(SMFICTX *ctx, unsigned char *chunk, size_t len)
{
	(void)ctx, (void)chunk, (void)len;
	return SMFIS_CONTINUE;
}

static sfsistat on_eom(SMFICTX *ctx)
{
	if (header_name && smfi_addheader(ctx, header_name, header_value) != MI_SUCCESS)
		return SMFIS_TEMPFAIL;
	return SMFIS_CONTINUE;
}

static sfsistat on_unknown(SMFICTX *ctx, const char *cmd)
{
	(void)ctx, (void)cmd;
	return SMFIS_CONTINUE;
}

static struct smfiDesc filter = {
	.xxfi_name = "smx-null-milter",
	.xxfi_version = SMFI_VERSION,
	.xxfi_flags = 0,
	.xxfi_connect = on_connect,
	.xxfi_helo = on_helo,
	.xxfi_envfrom = on_envelope,
	.xxfi_envrcpt = on_envelope,
	.xxfi_header = on_header,
	.xxfi_eoh = on_stage,
	.xxfi_body = on_body,
	.xxfi_eom = on_eom,
	.xxfi_abort = on_stage,
	.xxfi_close = on_stage,
	.xxfi_unknown = on_unknown,
	.xxfi_data = on_stage,
	.xxfi_negotiate = NULL,
};

static int usage(void)
{
	fprintf(stderr, "usage: smx-null-milter -p inet:PORT@HOST|unix:PATH [-a 'Name: value']\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *conn = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "p:a:")) != -1) {
		switch (opt) {
		case 'p':
			conn = optarg;
			break;
		case 'a': {
			char *colon = strchr(optarg, ':');
			if (!colon || colon == optarg)
				return usage();
			*colon = '\0';
			header_name = optarg;
			header_value = colon + 1 + strspn(colon + 1, " ");
			filter.xxfi_flags |= SMFIF_ADDHDRS;
			break;
		}
		default:
			return usage();
		}
	}
	if (!conn || optind != argc)
		return usage();
	/* relay-bench opens 100 and more sessions at once. */
	if (smfi_setconn((char *)conn) == MI_FAILURE || smfi_setbacklog(1024) == MI_FAILURE ||
	    smfi_register(filter) == MI_FAILURE) {
		fprintf(stderr, "smx-null-milter: cannot set up %s\n", conn);
		return 1;
	}
	return smfi_main() == MI_SUCCESS ? 0 : 1;
}
