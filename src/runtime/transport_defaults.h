#pragma once
// Options::sliceBytes and Options::slots 0 mean the transport's defaults: what every owner of a transport
// (Communicator, PeerLanes) runs with.
#include "ringguard/core/options.h"
#include "transport/transport.h"

namespace ringguard {

inline Options withTransportDefaults(Options o, const Transport& t) {
  if (o.sliceBytes == 0) o.sliceBytes = t.defaultSliceBytes();
  if (o.slots == 0) o.slots = t.defaultSlots();
  return o;
}

}  // namespace ringguard
