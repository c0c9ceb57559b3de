// ringguard._C.mpi_broadcast: rank 0's bytes to every rank of MPI_COMM_WORLD, for init_from_mpi() to agree on
// a free MASTER_PORT under mpirun (python/ringguard/__init__.py). Absent from builds without MPI.
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if RINGGUARD_PYTHON_MPI
#include "ringguard/mpi/mpi_communicator.h"
#endif

namespace py = pybind11;

void ringguardRegisterMpiBindings(py::module_& m) {
#if RINGGUARD_PYTHON_MPI
  m.def(
      "mpi_broadcast",
      [](const py::bytes& mine) {
        const std::string in = mine;
        std::vector<uint8_t> bytes(in.begin(), in.end());
        {
          py::gil_scoped_release nogil;
          std::unique_ptr<ringguard::Bootstrap> bootstrap;
          ringguard::Status st = ringguard::mpi::createBootstrap(&bootstrap);
          if (st.isOk()) st = bootstrap->broadcast(0, &bytes);
          if (!st.isOk()) throw std::runtime_error("ringguard: MPI broadcast from rank 0: " + st.toString());
        }
        return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      },
      py::arg("mine"));
#else
  (void)m;
#endif
}
