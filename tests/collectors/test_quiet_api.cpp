// The CUDA API calls the collector leaves unrecorded by default (collectors/inject/quiet_api.h):
// each constant names the call it says, by CUPTI's own table (cuptiGetCallbackName needs no
// GPU); none of them launches, copies, waits for or allocates anything, so no analysis loses a
// record; and the two calls that made most of a PyTorch loop's records are among them.
#include <QTest>

#include <set>
#include <string>
#include <string_view>

#include "collectors/inject/quiet_api.h"

using fulcrum::collect::kQuietDriverApis;
using fulcrum::collect::kQuietRuntimeApis;
using fulcrum::collect::QuietApi;

namespace {

// What a call that does work is named like; a quiet one must look like none of these.
bool looks_like_work(std::string_view name) {
    for (const std::string_view word :
         {"Launch", "Memcpy", "Memset", "Synchronize", "Malloc", "Free", "Alloc", "Event", "Graph",
          "Wait", "Query", "SetDevice", "StreamCreate", "StreamDestroy", "Host", "Register", "Copy",
          "Prefetch"}) {
        if (name.find(word) != std::string_view::npos) {
            return true;
        }
    }
    return false;
}

}  // namespace

class QuietApiTest : public QObject {
    Q_OBJECT

private slots:
    void constantsNameTheirCalls() {
        const auto check = [](CUpti_CallbackDomain domain, const auto& apis) {
            std::set<CUpti_CallbackId> seen;
            for (const QuietApi& api : apis) {
                const char* name = nullptr;
                QCOMPARE(cuptiGetCallbackName(domain, api.cbid, &name), CUPTI_SUCCESS);
                QVERIFY(name != nullptr);
                QCOMPARE(std::string(name), std::string(api.name));
                QVERIFY2(seen.insert(api.cbid).second, name);
            }
        };
        check(CUPTI_CB_DOMAIN_RUNTIME_API, kQuietRuntimeApis);
        check(CUPTI_CB_DOMAIN_DRIVER_API, kQuietDriverApis);
    }

    void noneDoesWork() {
        for (const QuietApi& api : kQuietRuntimeApis) {
            QVERIFY2(!looks_like_work(api.name), std::string(api.name).c_str());
        }
        for (const QuietApi& api : kQuietDriverApis) {
            QVERIFY2(!looks_like_work(api.name), std::string(api.name).c_str());
        }
    }

    void thePyTorchLoopsQueriesAreQuiet() {
        const auto has = [](const auto& apis, std::string_view name) {
            for (const QuietApi& api : apis) {
                if (api.name == name) {
                    return true;
                }
            }
            return false;
        };
        QVERIFY(has(kQuietRuntimeApis, "cudaGetDevice_v3020"));
        QVERIFY(has(kQuietDriverApis, "cuDevicePrimaryCtxGetState"));
        QVERIFY(!has(kQuietRuntimeApis, "cudaLaunchKernel_v7000"));
    }
};

QTEST_GUILESS_MAIN(QuietApiTest)
#include "test_quiet_api.moc"
