// replaced by the codec implementation
