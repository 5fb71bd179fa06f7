// The no-op task of the drain benchmark: the queue's own overhead is what is measured.
module.exports = async () => {};
