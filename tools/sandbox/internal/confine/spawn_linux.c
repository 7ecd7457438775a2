// The spawn stage: agentd's binary started again as agentd-sandbox-spawn
// (SpawnName in protocol_linux.go) makes the helper's namespaces here,
// before the Go runtime starts. Entering a new user namespace takes a real
// fork of the process that makes it (a vfork child shares its parent's
// memory, which a new user namespace refuses), and a real fork of agentd
// write-protects its whole heap, so that every page agentd writes
// afterwards faults once (BenchmarkBashSandboxHeap: ~0.9 s for 256 MiB on
// a paravirtualized machine). agentd therefore only vforks this stage,
// which forks the helper from a process of a few pages.
//
// Its arguments, all from sandbox.command: the status descriptor, the
// clone flags, the uid and gid the helper runs as (mapped to themselves),
// whether agentd runs as root (then setgroups is allowed and the helper
// drops its supplementary groups), the exit status of a failed set-up,
// and the helper's argv[0] and only environment entry. It relays the
// helper's end as its own: the same exit status, or death by the same
// signal.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

// The capabilities the helper keeps in its own namespaces, to mount, bring
// up loopback and drop every capability before it execs the command.
static const int helper_caps[] = {CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SETPCAP};

struct spawn_args {
	int status_fd;
	unsigned long flags;
	uid_t uid;
	gid_t gid;
	int root;
	int failed;
	char *helper_argv[2];
	char *helper_env[2];
};

// spawn_fail reports why the set-up failed where agentd reads it (the
// status descriptor) and on stderr, and exits.
static void spawn_fail(const struct spawn_args *a, int err, const char *format, ...) {
	char msg[512];
	va_list ap;
	va_start(ap, format);
	int n = vsnprintf(msg, sizeof msg - 64, format, ap);
	va_end(ap);
	if (n < 0) {
		n = 0;
	}
	if (n > (int)sizeof msg - 64) {
		n = sizeof msg - 64;
	}
	if (err != 0) {
		n += snprintf(msg + n, sizeof msg - n, ": %s", strerror(err));
	}
	if (a->status_fd >= 0) {
		ssize_t unused = write(a->status_fd, msg, n);
		(void)unused;
	}
	dprintf(2, "agentd sandbox: %.*s\n", n, msg);
	_exit(a->failed);
}

static int write_file(pid_t pid, const char *name, const char *text) {
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		return errno;
	}
	ssize_t n = write(fd, text, strlen(text));
	int err = n == (ssize_t)strlen(text) ? 0 : (n < 0 ? errno : EIO);
	close(fd);
	return err;
}

// helper_child runs in the new namespaces: once the parent has written its
// maps it takes the helper's identity and capabilities and execs it.
static void helper_child(const struct spawn_args *a, int sync_r) {
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		spawn_fail(a, errno, "set the helper's parent-death signal");
	}
	// EOF: the parent died or gave up before writing the maps.
	char go;
	if (read(sync_r, &go, 1) != 1) {
		_exit(a->failed);
	}
	if (prctl(PR_SET_KEEPCAPS, 1) != 0) {
		spawn_fail(a, errno, "keep capabilities across the change of identity");
	}
	if (a->root && setgroups(0, NULL) != 0) {
		spawn_fail(a, errno, "drop the supplementary groups");
	}
	if (setresgid(a->gid, a->gid, a->gid) != 0) {
		spawn_fail(a, errno, "take gid %u", (unsigned)a->gid);
	}
	if (setresuid(a->uid, a->uid, a->uid) != 0) {
		spawn_fail(a, errno, "take uid %u", (unsigned)a->uid);
	}
	// A change of identity clears the parent-death signal: set it again,
	// then make sure the parent did not die in between. It holds the
	// pipe's write end until it exits, so a hang-up means it is gone (its
	// pid means nothing here, in a PID namespace of our own).
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
		spawn_fail(a, errno, "set the helper's parent-death signal");
	}
	struct pollfd parent = {.fd = sync_r, .events = POLLIN};
	if (poll(&parent, 1, 0) != 0 && (parent.revents & (POLLHUP | POLLERR)) != 0) {
		_exit(a->failed);
	}
	struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2];
	if (syscall(SYS_capget, &header, data) != 0) {
		spawn_fail(a, errno, "read the helper's capabilities");
	}
	for (size_t i = 0; i < sizeof helper_caps / sizeof helper_caps[0]; i++) {
		int c = helper_caps[i];
		data[c / 32].permitted |= 1u << (c % 32);
		data[c / 32].inheritable |= 1u << (c % 32);
	}
	if (syscall(SYS_capset, &header, data) != 0) {
		spawn_fail(a, errno, "set the helper's capabilities");
	}
	for (size_t i = 0; i < sizeof helper_caps / sizeof helper_caps[0]; i++) {
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, helper_caps[i], 0, 0) != 0) {
			spawn_fail(a, errno, "raise the helper's ambient capability %d", helper_caps[i]);
		}
	}
	if (chdir("/") != 0) {
		spawn_fail(a, errno, "change to /");
	}
	execve("/proc/self/exe", a->helper_argv, a->helper_env);
	spawn_fail(a, errno, "start the helper");
}

// close_from closes every descriptor from first on but keep, in two
// close_range calls where the kernel has it (5.9), one close each
// otherwise.
static void close_from(int first, int keep) {
	if (syscall(SYS_close_range, first, keep - 1, 0) == 0 &&
	    syscall(SYS_close_range, keep + 1, ~0U, 0) == 0) {
		return;
	}
	for (int fd = first; fd < 1024; fd++) {
		if (fd != keep) {
			close(fd);
		}
	}
}

// relay ends this process as the helper ended.
static void relay(int status) {
	if (WIFEXITED(status)) {
		_exit(WEXITSTATUS(status));
	}
	int sig = WTERMSIG(status);
	// Die of the same signal, without leaving a core file of this stage.
	struct rlimit no_core = {0, 0};
	setrlimit(RLIMIT_CORE, &no_core);
	signal(sig, SIG_DFL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

static void spawn(int argc, char **argv) {
	struct spawn_args a = {.status_fd = -1, .failed = 126};
	if (argc != 9) {
		spawn_fail(&a, 0, "the spawn stage takes 8 arguments, not %d; agentd starts it itself", argc - 1);
	}
	char *end;
	a.status_fd = (int)strtol(argv[1], &end, 10);
	a.flags = strtoul(argv[2], &end, 0);
	a.uid = (uid_t)strtoul(argv[3], &end, 10);
	a.gid = (gid_t)strtoul(argv[4], &end, 10);
	a.root = strcmp(argv[5], "1") == 0;
	a.failed = (int)strtol(argv[6], &end, 10);
	a.helper_argv[0] = argv[7];
	a.helper_env[0] = argv[8];

	int sync[2];
	if (pipe2(sync, O_CLOEXEC) != 0) {
		spawn_fail(&a, errno, "make a pipe");
	}
	pid_t pid = (pid_t)syscall(SYS_clone, a.flags | SIGCHLD, 0, 0, 0, 0);
	if (pid < 0) {
		spawn_fail(&a, errno, "create the sandbox's namespaces");
	}
	if (pid == 0) {
		close(sync[1]);
		helper_child(&a, sync[0]);
	}
	close(sync[0]);
	char map[64];
	snprintf(map, sizeof map, "%u %u 1\n", (unsigned)a.uid, (unsigned)a.uid);
	int err = write_file(pid, "uid_map", map);
	if (err == 0 && !a.root) {
		err = write_file(pid, "setgroups", "deny");
	}
	if (err == 0) {
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)a.gid, (unsigned)a.gid);
		err = write_file(pid, "gid_map", map);
	}
	if (err != 0) {
		kill(pid, SIGKILL);
		spawn_fail(&a, err, "map the sandbox's identity (uid %u, gid %u) into its user namespace", (unsigned)a.uid, (unsigned)a.gid);
	}
	if (write(sync[1], "x", 1) != 1) {
		kill(pid, SIGKILL);
		spawn_fail(&a, errno, "start the helper");
	}
	// Only the helper keeps the descriptors agentd passed (configuration,
	// status, mounts): agentd learns that the command started when the
	// status descriptor closes, at the helper's exec. The pipe's write end
	// stays open, for the helper to see this process alive.
	close_from(3, sync[1]);
	int status;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			_exit(a.failed);
		}
	}
	relay(status);
}

// hold makes a user namespace for agentd to idmap a workspace with:
// unshared here, before the Go runtime starts threads, so that agentd
// need not fork itself into one. It says "ready" with one byte on stdout,
// agentd writes its maps and takes a handle on it, and it exits when
// agentd closes stdin.
static void hold(void) {
	if (unshare(CLONE_NEWUSER) != 0) {
		dprintf(2, "agentd sandbox: make a user namespace: %s\n", strerror(errno));
		_exit(1);
	}
	if (write(1, "u", 1) != 1) {
		_exit(1);
	}
	char buf[64];
	while (read(0, buf, sizeof buf) > 0) {
	}
	_exit(0);
}

// agentd_sandbox_spawn takes over a process started as the spawn stage
// or the namespace holder (SpawnName and HolderName in
// protocol_linux.go) before the Go runtime starts; any other start goes
// on as usual.
__attribute__((constructor)) static void agentd_sandbox_spawn(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc > 0 && argv[0] != NULL && strcmp(argv[0], "agentd-sandbox-spawn") == 0) {
		spawn(argc, argv);
	}
	if (argc > 0 && argv[0] != NULL && strcmp(argv[0], "agentd-sandbox-userns") == 0) {
		hold();
	}
}
