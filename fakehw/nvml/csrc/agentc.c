/*
 * A small client of the node agent's control API (HTTP/1.1 + JSON on the unix socket named by
 * $FAKEHW_AGENT_SOCKET). The shim only reads the snapshot; calls that change the hardware (MIG mode, GPU and
 * compute instances) ask the agent, which journals the change and renders a new snapshot generation before it
 * answers. One request per connection ("Connection: close"), bounded in size and time.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define AGENT_TIMEOUT_MS 30000

static int64_t left_ms(int64_t deadline) {
    int64_t now = fhw_now_ms();
    return deadline > now ? deadline - now : 0;
}

static int send_all(int fd, const char *p, size_t n, int64_t deadline) {
    while (n > 0) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int ready = poll(&pfd, 1, (int)left_ms(deadline));
        if (ready < 0 && errno == EINTR) continue; /* a signal, not the socket: wait again (POSIX poll) */
        if (ready <= 0) return -1;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The Content-Length of an answer whose head (status line and fields, NUL-terminated) is `head`: -1 when it has
   none, -2 when its value is not a length. RFC 9112 6.3: the length "defines the expected message body length in
   octets", and a recipient that gets fewer before the close "MUST consider the message to be incomplete"; RFC 9110
   5.1 and 8.6: the field's name is case-insensitive, its value 1*DIGIT, optional whitespace around it. */
static long long content_length(const char *head) {
    const char *field = strcasestr(head, "\r\nContent-Length:");
    if (field == NULL) return -1;
    const char *v = field + strlen("\r\nContent-Length:");
    while (*v == ' ' || *v == '\t') v++;
    if (*v < '0' || *v > '9') return -2; /* no digit, or a sign strtoll would take */
    char *end = NULL;
    long long n = strtoll(v, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    return *end == '\r' || *end == '\0' ? n : -2;
}

/* Whether the `got` bytes at `buf` hold a whole answer framed by its Content-Length: RFC 9112 6.3, the length
   "defines the expected message body length in octets", so the answer is complete once that many follow the head,
   whether or not the peer then closes (a peer that ignores "Connection: close" and keeps the connection open has
   still answered). An answer without a valid length ends only at the close. */
static int framed_complete(char *buf, size_t got) {
    char *end = memmem(buf, got, "\r\n\r\n", 4);
    if (end == NULL) return 0;
    *end = '\0'; /* the head alone, for its fields */
    long long want = content_length(buf);
    *end = '\r';
    return want >= 0 && buf + got - (end + 4) >= want;
}

/* Read until the peer closes, the answer is complete by its Content-Length, the buffer is full or the deadline
   passes; returns bytes read or -1. */
static ssize_t recv_all(int fd, char *buf, size_t cap, int64_t deadline) {
    size_t got = 0;
    while (got < cap) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int64_t ms = left_ms(deadline);
        int ready = ms == 0 ? 0 : poll(&pfd, 1, (int)ms);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return -1;
        ssize_t r = recv(fd, buf + got, cap - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
        if (framed_complete(buf, got)) break;
    }
    return (ssize_t)got;
}

static int connect_agent(const char **why) {
    const char *path = getenv("FAKEHW_AGENT_SOCKET");
    struct sockaddr_un addr;
    if (path == NULL || *path == '\0') {
        *why = "FAKEHW_AGENT_SOCKET is not set (no node agent to apply the change)";
        return -1;
    }
    if (strlen(path) >= sizeof addr.sun_path) {
        *why = "FAKEHW_AGENT_SOCKET is longer than a unix socket path may be";
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *why = "cannot create a socket";
        return -1;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, strlen(path));
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        *why = errno == EACCES ? "no permission to use the agent socket" : "cannot connect to the agent socket";
        close(fd);
        return -1;
    }
    return fd;
}

int fhw_agent_request(const char *method, const char *path, const char *body, char *resp, size_t resp_cap,
                      const char **why) {
    static const char *unused;
    if (why == NULL) why = &unused;
    *why = NULL;
    if (resp == NULL || resp_cap < 2) return -1;
    resp[0] = '\0';
    int fd = connect_agent(why);
    if (fd < 0) return -1;
    int64_t deadline = fhw_now_ms() + AGENT_TIMEOUT_MS;
    size_t blen = body ? strlen(body) : 0;
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: fakehw-agent\r\nConnection: close\r\nAccept: application/json\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     method, path, blen);
    static char raw[16384];
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* raw is shared: one request at a time */
    int status = -1;
    if (n <= 0 || (size_t)n >= sizeof head) {
        *why = "request path too long";
        close(fd);
        return -1;
    }
    pthread_mutex_lock(&lock);
    if (send_all(fd, head, (size_t)n, deadline) != 0 || (blen && send_all(fd, body, blen, deadline) != 0)) {
        *why = "the agent did not take the request";
    } else {
        ssize_t got = recv_all(fd, raw, sizeof raw - 1, deadline);
        if (got <= 0) {
            *why = "no answer from the agent";
        } else {
            raw[got] = '\0';
            char *payload = strstr(raw, "\r\n\r\n");
            if (strncmp(raw, "HTTP/1.", 7) != 0 || payload == NULL || sscanf(raw + 8, " %d", &status) != 1) {
                *why = "the agent's answer is not HTTP";
                status = -1;
            } else {
                char *body = payload + 4;
                *payload = '\0'; /* the head alone, for its fields */
                long long want = content_length(raw);
                if (want == -2) {
                    *why = "the agent's answer has a Content-Length that is not a length";
                    status = -1;
                } else if (want > raw + got - body) {
                    *why = "the agent's answer is shorter than its Content-Length";
                    status = -1;
                } else {
                    if (want >= 0) body[want] = '\0';
                    snprintf(resp, resp_cap, "%s", body);
                }
            }
        }
    }
    pthread_mutex_unlock(&lock);
    close(fd);
    fhw_trace("agent %s %s -> %d %s", method, path, status, status < 0 ? (*why ? *why : "") : resp);
    return status;
}

/* JSON's insignificant whitespace (RFC 8259 2: space, tab, line feed, carriage return), which may stand on either
   side of a member's colon. */
static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

long long fhw_json_int(const char *json, const char *key, int *found) {
    char pattern[64];
    *found = 0;
    if (json == NULL || snprintf(pattern, sizeof pattern, "\"%s\"", key) >= (int)sizeof pattern) return 0;
    /* The first "key" followed by a colon names the member; one followed by anything else is a string value. */
    for (const char *k = strstr(json, pattern); k != NULL; k = strstr(k + 1, pattern)) {
        const char *p = skip_ws(k + strlen(pattern));
        if (*p != ':') continue;
        p = skip_ws(p + 1);
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p) return 0;
        *found = 1;
        return v;
    }
    return 0;
}
