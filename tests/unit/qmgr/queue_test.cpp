// The active queue as the owner of recipient state: the transition table,
// the open counts it keeps, and a panic (abort) on an impossible transition.
#include "qmgr/queue.hpp"

#include "libsm/ids.hpp"
#include "tests/unit/qmgr/envelope.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>

using namespace smx::qmgr;

namespace {

// Runs f in a child process; true when the child died of SIGABRT (smx::panic).
bool aborts(const std::function<void()>& f) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // Not Catch2's handler (it would report the child as a failed test),
        // no core file, and the panic line is not the test's output.
        std::signal(SIGABRT, SIG_DFL);
        const rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        if (int fd = ::open("/dev/null", O_WRONLY); fd >= 0) {
            ::dup2(fd, 1);
            ::dup2(fd, 2);
        }
        f();
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

} // namespace

TEST_CASE("transition table: the legal edges and nothing else") {
    using S = RcptState;
    using E = RcptEvent;
    CHECK(next_state(S::active, E::dispatch) == S::inflight);
    CHECK(next_state(S::inflight, E::requeue) == S::active);
    CHECK(next_state(S::inflight, E::sent) == S::done);
    CHECK(next_state(S::active, E::defer_begin) == S::moving);
    CHECK(next_state(S::inflight, E::defer_begin) == S::moving);
    CHECK(next_state(S::moving, E::deferred) == S::deferred);
    CHECK(next_state(S::inflight, E::bounce_begin) == S::bouncing);
    CHECK(next_state(S::bouncing, E::bounce_failed) == S::moving);
    CHECK(next_state(S::bouncing, E::bounced) == S::bounced);
    CHECK(next_state(S::deferred, E::due) == S::active);
    CHECK(next_state(S::untracked, E::due) == S::active);
    CHECK(next_state(S::moving, E::drop) == S::done);
    // A sample of impossible ones: closed states take no event but due.
    CHECK_FALSE(next_state(S::active, E::sent));
    CHECK_FALSE(next_state(S::done, E::sent));
    CHECK_FALSE(next_state(S::done, E::due));
    CHECK_FALSE(next_state(S::bounced, E::bounced));
    CHECK_FALSE(next_state(S::deferred, E::deferred));
    CHECK_FALSE(next_state(S::moving, E::dispatch));
    CHECK_FALSE(next_state(S::bouncing, E::drop));
    // Every (state, event) pair: the closed states only ever leave by due.
    int legal = 0;
    for (int s = 0; s <= static_cast<int>(S::untracked); ++s)
        for (int e = 0; e <= static_cast<int>(E::drop); ++e)
            if (auto to = next_state(static_cast<S>(s), static_cast<E>(e))) {
                ++legal;
                if (is_closed(static_cast<S>(s))) CHECK(static_cast<E>(e) == E::due);
            }
    CHECK(legal == 15);
}

TEST_CASE("a recipient's life: counts follow the transitions") {
    ActiveQueue q;
    Ta* ta = q.admit(envelope({"a@x", "b@x", "c@x"}));
    REQUIRE(ta);
    smx::msg::TaCommit same;
    same.ta_id = ta->id;
    CHECK(q.admit(same) == nullptr);
    CHECK(q.rcpts() == 3);
    CHECK(ta->open() == 3);

    q.dispatch(*ta, 0);
    q.sent(*ta, 0);  // a: delivered
    CHECK(ta->rcpt(0).state() == RcptState::done);
    CHECK(q.rcpts() == 2);

    q.dispatch(*ta, 1);
    q.count_attempt(*ta, 1);
    q.defer_begin(*ta, 1, {451, "4.3.0", "later"}, "mx[192.0.2.1]:25");
    CHECK(ta->rcpt(1).state() == RcptState::moving);
    CHECK(ta->rcpt(1).last_reply() == smx::msg::Reply{451, "4.3.0", "later"});
    CHECK(ta->rcpt(1).last_relay() == "mx[192.0.2.1]:25");
    CHECK(q.rcpts() == 2);  // moving is still open: it waits for DEFEDB
    q.mark_warned(*ta, 1);
    q.deferred(*ta, 1);
    CHECK(ta->rcpt(1).from_defedb());
    CHECK(ta->touched_defedb());
    CHECK(q.rcpts() == 1);

    q.bounce_begin(*ta, 2, {550, "5.1.1", "no"}, "mx[192.0.2.1]:25");
    q.bounce_failed(*ta, 2, {0, "4.3.0", "no DSN"});
    CHECK(ta->rcpt(2).last_relay().empty());
    q.deferred(*ta, 2);
    CHECK(ta->open() == 0);

    // DEFEDB gives b back, with the attempts it recorded.
    DeferredRcpt rec;
    rec.attempts = 4;
    rec.last_reply = {451, "", "again"};
    rec.last_relay = "mx2[192.0.2.2]:25";
    rec.warned = true;
    q.due(*ta, 1, rec);
    CHECK(ta->rcpt(1).state() == RcptState::active);
    CHECK(ta->rcpt(1).attempts() == 4);
    CHECK(ta->rcpt(1).warned());
    CHECK(ta->rcpt(1).last_reply() == rec.last_reply);
    CHECK(ta->rcpt(1).last_relay() == rec.last_relay);
    CHECK(q.rcpts() == 1);
    q.bounce_begin(*ta, 1, {550, "5.0.0", "bad"}, {});
    q.bounced(*ta, 1);
    CHECK(ta->open() == 0);
    q.retire(*ta);
    CHECK(q.transactions() == 0);
    CHECK(q.rcpts() == 0);
}

TEST_CASE("transactions from IBDB recovery and from DEFEDB start in the right states") {
    ActiveQueue q;
    Ta* rec = q.admit_recovered(envelope({"a@x", "b@x", "c@x"}), {true, false, false},
                                {false, true, false});
    REQUIRE(rec);
    CHECK(rec->rcpt(0).state() == RcptState::done);
    CHECK(rec->rcpt(1).state() == RcptState::deferred);
    CHECK(rec->rcpt(1).from_defedb());
    CHECK(rec->rcpt(2).state() == RcptState::active);
    CHECK(rec->touched_defedb());
    CHECK(q.rcpts() == 1);

    Ta* back = q.admit_untracked(envelope({"c@x", "d@x"}));
    REQUIRE(back);
    CHECK(back->open() == 0);
    CHECK(back->rcpt(0).state() == RcptState::untracked);
    q.due(*back, 1, DeferredRcpt{});
    CHECK(q.rcpts() == 2);

    // A transaction never made durable goes with its recipients.
    Ta* lost = q.admit(envelope({"e@x"}));
    q.abandon(lost->id);
    CHECK(q.rcpts() == 2);
    CHECK(q.transactions() == 2);
}

TEST_CASE("an impossible transition panics") {
    CHECK_FALSE(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.dispatch(*ta, 0);
        q.sent(*ta, 0);
    }));
    // Closing twice (ActiveQueue::close used to ignore it).
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.dispatch(*ta, 0);
        q.sent(*ta, 0);
        q.sent(*ta, 0);
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.sent(*ta, 0);  // never dispatched
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.drop(*ta, 0);  // not deleted
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.due(*ta, 0, DeferredRcpt{});  // still in memory: DEFEDB cannot hand it back
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.retire(*ta);  // a recipient is still open
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.mark_deleted(*ta);
        q.mark_deleted(*ta);
    }));
    CHECK(aborts([] {
        ActiveQueue q;
        Ta* ta = q.admit(envelope({"a@x"}));
        q.defer_begin(*ta, 0, {0, {}, "x"}, {});
        q.mark_warned(*ta, 0);
        q.mark_warned(*ta, 0);  // warned once only
    }));
}
