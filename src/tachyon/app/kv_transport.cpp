#include "tachyon/app/kv_transport.h"

#include "tachyon/base/check.h"
#ifdef TACHYON_HAVE_UCX
#include "tachyon/runner/ucx/ucx_kv_rows.h"
#endif

namespace tachyon::app {

using runner::ForwardingModelRunner;
using runner::KvRowAccess;
using runner::ModelRunner;
namespace {

// The inner cache's rows with no reference offered: every pull is answered with rows.
class RowsOnly : public runner::ForwardingKvRowAccess {
 public:
  using ForwardingKvRowAccess::ForwardingKvRowAccess;
  std::string reference_fingerprint() const override { return ""; }
  std::string reference_descriptor() const override { return ""; }
};

class KvTransportRunner : public ForwardingModelRunner {
 public:
  KvTransportRunner(std::unique_ptr<ModelRunner> inner, const std::string& transport)
      : ForwardingModelRunner(std::move(inner)) {
    KvRowAccess& rows = *this->inner().kv_rows();
    if (transport == "tcp") {
      rows_ = std::make_unique<RowsOnly>(rows);
    } else {
#ifdef TACHYON_HAVE_UCX
      rows_ = std::make_unique<runner::ucx::UcxKvRowAccess>(rows);
#else
      throw Error("--kv-transport ucx: this build has no UCX (install Debian's libucx-dev and build again)");
#endif
    }
  }
  KvRowAccess* kv_rows() override { return rows_.get(); }

 private:
  std::unique_ptr<KvRowAccess> rows_;
};

}  // namespace

bool ucx_available() {
#ifdef TACHYON_HAVE_UCX
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ModelRunner> with_kv_transport(std::unique_ptr<ModelRunner> runner, const std::string& transport) {
  TACHYON_CHECK(transport == "auto" || transport == "tcp" || transport == "ucx")
      << "--kv-transport " << transport << ": give auto, tcp or ucx";
  if (transport == "auto" || runner->kv_rows() == nullptr) return runner;
  return std::make_unique<KvTransportRunner>(std::move(runner), transport);
}

}  // namespace tachyon::app
